//! What CNI plugins print and what network configuration files hold: a result's addresses
//! read (or none), a configuration list parsed (or refused), never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use peapod_daemon::network::cni::{result_ips, NetworkList};

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        for ip in result_ips(&v) {
            assert!(!ip.contains('/'), "{ip}");
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(list) = NetworkList::parse(text, "fuzz.conflist") {
            let again = NetworkList::from_value(&list.to_value()).expect("round trip");
            assert_eq!(again.plugin_types(), list.plugin_types());
        }
    }
});
