//! Pod manifests as `peapod apply -f` reads them: YAML or JSON documents, each turned into a
//! Pod and validated; bad input gets an error, never a panic or a hang.
#![no_main]
use libfuzzer_sys::fuzz_target;
use peapod_kubelet::{manifest, validate};

fuzz_target!(|data: &[u8]| {
    if data.len() > 64 << 10 {
        return;
    }
    let Ok(docs) = manifest::documents(data, "fuzz.yaml") else {
        return;
    };
    for doc in docs {
        if let Ok(pod) = manifest::pod_from_value(doc) {
            let _ = validate::validate_pod(&pod);
        }
    }
});
