//! CRI log files as `peapod logs` reads them back: any text gives lines (never a panic), and a
//! log written in the CRI format from any chunks of text reads back as that text.
#![no_main]
use libfuzzer_sys::fuzz_target;

// The reader lives in the CLI; it is one self-contained file.
#[path = "../../cli/src/kube/crilog.rs"]
#[allow(dead_code)]
mod crilog;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = crilog::lines(&text, Some(3));
    assert!(lines.len() <= 3);
    let all = crilog::lines(&text, None);
    assert!(all.len() <= text.lines().count());

    // Written as the shim does: each chunk a P record, the last of a line an F record.
    let mut log = String::new();
    let mut want = Vec::new();
    for line in text.split('\n').filter(|l| !l.contains('\r')) {
        let chunks: Vec<&str> = line.split_inclusive(' ').collect();
        if chunks.is_empty() {
            log.push_str("2026-01-01T00:00:00.000000000Z stdout F \n");
        }
        for (i, c) in chunks.iter().enumerate() {
            let tag = if i + 1 == chunks.len() { "F" } else { "P" };
            log.push_str(&format!("2026-01-01T00:00:00.000000000Z stdout {tag} {c}\n"));
        }
        want.push(line.to_string());
    }
    let got: Vec<String> = crilog::lines(&log, None).into_iter().map(|l| l.text).collect();
    assert_eq!(got, want);
});
