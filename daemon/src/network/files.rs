//! The files that tell a pod's containers about its network: /etc/resolv.conf (from the
//! sandbox's DNSConfig, else the host's), /etc/hosts and /etc/hostname.

use crate::error::{Error, Result};
use peapod_proto::v1::DnsConfig;
use std::path::Path;

/// resolv.conf text for a DNS config; `None` when the config is empty (use the host's file).
pub fn resolv_conf(dns: Option<&DnsConfig>) -> Option<String> {
    let dns = dns?;
    if dns.servers.is_empty() && dns.searches.is_empty() && dns.options.is_empty() {
        return None;
    }
    let mut out = String::new();
    if !dns.searches.is_empty() {
        out.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    for server in &dns.servers {
        out.push_str(&format!("nameserver {server}\n"));
    }
    if !dns.options.is_empty() {
        out.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    Some(out)
}

/// /etc/hosts for a pod: localhost entries and the pod's own name on its first IP.
pub fn hosts(hostname: &str, ips: &[String]) -> String {
    let mut out = String::from(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    if !hostname.is_empty() {
        match ips.first() {
            Some(ip) => out.push_str(&format!("{ip}\t{hostname}\n")),
            None => out.push_str(&format!("127.0.1.1\t{hostname}\n")),
        }
    }
    out
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::path("write", path, e))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| Error::path("chmod", path, e))
}

/// Writes hostname, hosts and resolv.conf into the sandbox directory (off the async workers:
/// it reads the host's files and writes three of its own).
pub fn write_sandbox_files(
    dir: &Path,
    hostname: &str,
    ips: &[String],
    dns: Option<&DnsConfig>,
    host_network: bool,
) -> Result<()> {
    crate::blocking::off_runtime(|| {
        let name = pod_hostname(hostname);
        write(&dir.join("hostname"), &format!("{name}\n"))?;
        let hosts_text = if host_network {
            std::fs::read_to_string("/etc/hosts").unwrap_or_else(|_| hosts(&name, ips))
        } else {
            hosts(&name, ips)
        };
        write(&dir.join("hosts"), &hosts_text)?;
        let resolv = match resolv_conf(dns) {
            Some(text) => text,
            None => std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
        };
        write(&dir.join("resolv.conf"), &resolv)
    })
}

/// The pod's hostname: the one asked for, else the host's.
fn pod_hostname(hostname: &str) -> String {
    if hostname.is_empty() {
        nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        hostname.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_from_dns_config() {
        let dns = DnsConfig {
            servers: vec!["10.96.0.10".into(), "1.1.1.1".into()],
            searches: vec![
                "default.svc.cluster.local".into(),
                "svc.cluster.local".into(),
            ],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(Some(&dns)).unwrap(),
            "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\nnameserver 1.1.1.1\noptions ndots:5\n"
        );
        assert_eq!(resolv_conf(Some(&DnsConfig::default())), None);
        assert_eq!(resolv_conf(None), None);
    }

    #[test]
    fn hosts_names_the_pod_on_its_ip() {
        let h = hosts("web-0", &["10.88.0.7".into()]);
        assert!(h.starts_with("127.0.0.1\tlocalhost\n"));
        assert!(h.ends_with("10.88.0.7\tweb-0\n"));
    }
}
