//! Invoking CNI plugins as the CNI specification says.
//!
//! A network configuration list runs plugin by plugin: ADD in order, each getting the previous
//! result as `prevResult`; DEL in reverse order with the ADD result as `prevResult`. Plugins
//! get `runtimeConfig` only for the capabilities they declare (`portMappings`, `ipRanges`).
//! Every invocation has a timeout, and a failed ADD is rolled back with DEL.

use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The interface name inside the pod.
pub const POD_IFNAME: &str = "eth0";

/// Largest plugin output read (a result is a few KiB).
const MAX_OUTPUT: usize = 1 << 20;

/// A network configuration list (a `.conf` is turned into a one-plugin list).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkList {
    pub name: String,
    pub cni_version: String,
    pub plugins: Vec<Value>,
    /// Where it came from (a file, or "built-in").
    pub source: String,
}

impl NetworkList {
    /// Parses `.conflist` or `.conf` JSON text.
    pub fn parse(text: &str, source: &str) -> Result<NetworkList> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| network_error_from(format!("{source}: invalid JSON"), e))?;
        let name = v["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| network_error(format!("{source}: no network name")))?
            .to_string();
        let cni_version = v["cniVersion"].as_str().unwrap_or("0.4.0").to_string();
        let plugins = match v.get("plugins") {
            Some(Value::Array(list)) => list.clone(),
            Some(_) => return Err(network_error(format!("{source}: plugins is not a list"))),
            None => {
                let mut single = v.clone();
                if let Some(o) = single.as_object_mut() {
                    o.remove("name");
                    o.remove("cniVersion");
                }
                vec![single]
            }
        };
        if plugins.is_empty() {
            return Err(network_error(format!("{source}: no plugins")));
        }
        for p in &plugins {
            if p["type"].as_str().is_none_or(str::is_empty) {
                return Err(network_error(format!("{source}: a plugin has no type")));
            }
        }
        Ok(NetworkList {
            name,
            cni_version,
            plugins,
            source: source.to_string(),
        })
    }

    pub fn to_value(&self) -> Value {
        json!({"name": self.name, "cniVersion": self.cni_version, "plugins": self.plugins})
    }

    pub fn from_value(v: &Value) -> Result<NetworkList> {
        NetworkList::parse(&v.to_string(), "stored network")
    }

    pub fn plugin_types(&self) -> Vec<String> {
        self.plugins
            .iter()
            .filter_map(|p| p["type"].as_str().map(str::to_string))
            .collect()
    }

    /// The network used when the configuration directory has none. `subnet` is the pod
    /// CIDR when the kubelet gave one (UpdateRuntimeConfig), else the configured default: it
    /// is the range itself, not an `ipRanges` capability, because host-local prepends
    /// runtime ranges to its configured ones, which then overlap (ADD fails) or, when
    /// disjoint, give every pod an address from each.
    pub fn builtin_bridge(bridge: &str, subnet: &str, data_dir: &Path) -> NetworkList {
        NetworkList {
            name: "peapod".into(),
            cni_version: "1.0.0".into(),
            plugins: vec![
                json!({
                    "type": "bridge",
                    "bridge": bridge,
                    "isGateway": true,
                    "ipMasq": true,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": subnet}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": data_dir,
                    }
                }),
                json!({"type": "portmap", "capabilities": {"portMappings": true}}),
            ],
            source: "built-in".into(),
        }
    }
}

/// The first configuration in `dir` by file name (`*.conflist`, `*.conf`, `*.json`).
pub fn load_from_dir(dir: &Path) -> Result<Option<NetworkList>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::path("read CNI config dir", dir, e)),
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("conflist" | "conf" | "json")
            )
        })
        .collect();
    files.sort();
    let Some(first) = files.first() else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(first).map_err(|e| Error::path("read", first, e))?;
    NetworkList::parse(&text, &first.display().to_string()).map(Some)
}

/// Finds a plugin binary in the search path.
pub fn find_plugin(bin_dirs: &[PathBuf], plugin: &str) -> Option<PathBuf> {
    if plugin.contains('/') {
        return None;
    }
    bin_dirs
        .iter()
        .map(|d| d.join(plugin))
        .find(|p| p.is_file())
}

/// One pod's identity as CNI sees it.
#[derive(Debug, Clone)]
pub struct Attachment<'a> {
    pub container_id: &'a str,
    pub netns: &'a Path,
    pub ifname: &'a str,
    /// CNI_ARGS pairs (K8S_POD_NAMESPACE and friends).
    pub args: &'a [(String, String)],
    /// Capability arguments: keys such as "portMappings", "ipRanges".
    pub runtime_config: &'a Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    Add,
    Del,
}

impl Command {
    fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
        }
    }
}

/// Runs plugins.
#[derive(Debug, Clone)]
pub struct Invoker {
    pub bin_dirs: Vec<PathBuf>,
    pub timeout: Duration,
}

/// The plugin's error result, or its stderr, or its exit status.
fn plugin_error(
    plugin: &str,
    command: Command,
    stdout: &[u8],
    stderr: &[u8],
    code: Option<i32>,
) -> Error {
    let parsed: Option<Value> = serde_json::from_slice(stdout).ok();
    let msg = parsed
        .as_ref()
        .and_then(|v| {
            let msg = v["msg"].as_str()?;
            Some(match v["details"].as_str().filter(|d| !d.is_empty()) {
                Some(d) => format!("{msg}: {d}"),
                None => msg.to_string(),
            })
        })
        .or_else(|| {
            let s = String::from_utf8_lossy(stderr).trim().to_string();
            (!s.is_empty()).then_some(s)
        })
        .unwrap_or_else(|| format!("exit status {}", code.unwrap_or(-1)));
    network_error(format!(
        "plugin {plugin} failed ({}): {msg}",
        command.as_str()
    ))
}

impl Invoker {
    #[tracing::instrument(level = "debug", name = "cni.plugin", skip_all, fields(command = command.as_str(), plugin = plugin_conf["type"].as_str().unwrap_or_default()))]
    async fn invoke(
        &self,
        command: Command,
        plugin_conf: &Value,
        att: &Attachment<'_>,
    ) -> Result<Value> {
        let plugin = plugin_conf["type"].as_str().unwrap_or_default().to_string();
        let binary = find_plugin(&self.bin_dirs, &plugin).ok_or_else(|| {
            network_error(format!(
                "CNI plugin {plugin:?} not found in {}",
                self.bin_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            ))
        })?;
        let cni_args = std::iter::once("IgnoreUnknown=1".to_string())
            .chain(att.args.iter().map(|(k, v)| format!("{k}={v}")))
            .collect::<Vec<_>>()
            .join(";");
        let path = self
            .bin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let mut child = tokio::process::Command::new(&binary)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("CNI_COMMAND", command.as_str())
            .env("CNI_CONTAINERID", att.container_id)
            .env("CNI_NETNS", att.netns)
            .env("CNI_IFNAME", att.ifname)
            .env("CNI_ARGS", cni_args)
            .env("CNI_PATH", path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| network_error_from(format!("run CNI plugin {}", binary.display()), e))?;
        let input = serde_json::to_vec(plugin_conf).unwrap_or_default();
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&input).await;
        }
        let output = tokio::time::timeout(self.timeout, child.wait_with_output())
            .await
            .map_err(|_| {
                network_error(format!(
                    "plugin {plugin} ({}) did not finish within {:?}",
                    command.as_str(),
                    self.timeout
                ))
            })?
            .map_err(|e| network_error_from(format!("wait for CNI plugin {plugin}"), e))?;
        if !output.status.success() {
            return Err(plugin_error(
                &plugin,
                command,
                &output.stdout,
                &output.stderr,
                output.status.code(),
            ));
        }
        if output.stdout.len() > MAX_OUTPUT {
            return Err(network_error(format!(
                "plugin {plugin} wrote an oversized result"
            )));
        }
        if command == Command::Del || output.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&output.stdout)
            .map_err(|e| network_error_from(format!("plugin {plugin} wrote an invalid result"), e))
    }

    /// The configuration one plugin gets on stdin.
    fn plugin_config(list: &NetworkList, plugin: &Value, prev: &Value, rc: &Value) -> Value {
        let mut conf = plugin.clone();
        let Some(obj) = conf.as_object_mut() else {
            return conf;
        };
        obj.insert("name".into(), json!(list.name));
        obj.insert("cniVersion".into(), json!(list.cni_version));
        if !prev.is_null() {
            obj.insert("prevResult".into(), prev.clone());
        }
        let mut runtime_config = serde_json::Map::new();
        if let (Some(caps), Some(rc)) = (plugin["capabilities"].as_object(), rc.as_object()) {
            for (cap, enabled) in caps {
                if enabled.as_bool() == Some(true) {
                    if let Some(v) = rc.get(cap) {
                        runtime_config.insert(cap.clone(), v.clone());
                    }
                }
            }
        }
        if !runtime_config.is_empty() {
            obj.insert("runtimeConfig".into(), Value::Object(runtime_config));
        }
        conf
    }

    /// ADD on every plugin of the list; on failure the plugins already run get DEL.
    pub async fn add(&self, list: &NetworkList, att: &Attachment<'_>) -> Result<Value> {
        let mut prev = Value::Null;
        for (i, plugin) in list.plugins.iter().enumerate() {
            let conf = Self::plugin_config(list, plugin, &prev, att.runtime_config);
            match self.invoke(Command::Add, &conf, att).await {
                Ok(result) => prev = result,
                Err(err) => {
                    let partial = NetworkList {
                        plugins: list.plugins[..=i].to_vec(),
                        ..list.clone()
                    };
                    if let Err(del_err) = self.del(&partial, att, &prev).await {
                        tracing::warn!(network = %list.name, error = %del_err, "rolling back a failed CNI ADD");
                    }
                    return Err(err);
                }
            }
        }
        Ok(prev)
    }

    /// DEL on every plugin, in reverse order. All plugins are tried; the first error is returned.
    pub async fn del(
        &self,
        list: &NetworkList,
        att: &Attachment<'_>,
        add_result: &Value,
    ) -> Result<()> {
        let mut first_err = None;
        for plugin in list.plugins.iter().rev() {
            let conf = Self::plugin_config(list, plugin, add_result, att.runtime_config);
            if let Err(err) = self.invoke(Command::Del, &conf, att).await {
                first_err.get_or_insert(err);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// The IP addresses (without prefix length) a result assigned, IPv4 first.
pub fn result_ips(result: &Value) -> Vec<String> {
    let mut ips: Vec<String> = result["ips"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|ip| ip["address"].as_str())
                .map(|a| a.split('/').next().unwrap_or(a).to_string())
                .collect()
        })
        .unwrap_or_default();
    ips.sort_by_key(|ip| ip.contains(':'));
    ips
}

/// The addresses a result gave the pod's own interfaces (those in its namespace: with a
/// `sandbox`): `(interface, address, prefix length)`.
pub fn pod_interface_addresses(result: &Value) -> Vec<(String, std::net::IpAddr, u8)> {
    let interfaces = result["interfaces"].as_array().cloned().unwrap_or_default();
    let in_pod = |i: &Value| -> Option<String> {
        let iface = interfaces.get(usize::try_from(i.as_u64()?).ok()?)?;
        let sandbox = iface["sandbox"].as_str().filter(|s| !s.is_empty());
        sandbox.and(iface["name"].as_str()).map(str::to_string)
    };
    result["ips"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|ip| {
                    let (address, prefix) = ip["address"].as_str()?.split_once('/')?;
                    Some((
                        in_pod(&ip["interface"])?,
                        address.parse().ok()?,
                        prefix.parse().ok()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A CNI failure: the message says which plugin and call.
fn network_error(message: String) -> Error {
    Error::internal(format!("network: {message}"))
}

/// A CNI failure with the error that caused it.
fn network_error_from(context: String, cause: impl Into<crate::error::Cause>) -> Error {
    Error::caused(
        crate::error::Code::Internal,
        format!("network: {context}"),
        cause,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_interfaces_addresses_are_read_from_a_result() {
        let result = serde_json::json!({
            "interfaces": [
                {"name": "ppk0", "mac": "aa"},
                {"name": "veth1", "mac": "bb"},
                {"name": "eth0", "mac": "cc", "sandbox": "/run/peapod/netns/x"},
            ],
            "ips": [
                {"address": "10.244.1.7/24", "gateway": "10.244.1.1", "interface": 2},
                {"address": "fd00::7/64", "interface": 2},
                {"address": "10.9.9.9/32", "interface": 0},
                {"address": "10.8.8.8/32"},
                {"address": "junk", "interface": 2},
            ],
        });
        assert_eq!(
            pod_interface_addresses(&result),
            vec![
                ("eth0".to_string(), "10.244.1.7".parse().unwrap(), 24),
                ("eth0".to_string(), "fd00::7".parse().unwrap(), 64),
            ]
        );
        assert!(pod_interface_addresses(&serde_json::json!({})).is_empty());
    }

    #[test]
    fn parses_conflist_and_conf() {
        let l = NetworkList::parse(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"portmap"}]}"#,
            "a.conflist",
        )
        .unwrap();
        assert_eq!(l.plugin_types(), vec!["bridge", "portmap"]);
        let c = NetworkList::parse(
            r#"{"cniVersion":"0.4.0","name":"n","type":"ptp","ipam":{}}"#,
            "b.conf",
        )
        .unwrap();
        assert_eq!(c.plugin_types(), vec!["ptp"]);
        assert!(c.plugins[0].get("name").is_none());
        assert!(NetworkList::parse("{}", "x").is_err());
        assert!(NetworkList::parse(r#"{"name":"n","plugins":[{}]}"#, "x").is_err());
        assert!(NetworkList::parse("not json", "x").is_err());
    }

    #[test]
    fn plugin_config_carries_prev_result_and_only_declared_capabilities() {
        let list = NetworkList::parse(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[
                {"type":"bridge","capabilities":{"ipRanges":true},"ipam":{"type":"host-local"}},
                {"type":"portmap","capabilities":{"portMappings":true}}]}"#,
            "test",
        )
        .unwrap();
        let rc = json!({"portMappings": [{"hostPort": 8080}], "ipRanges": [[{"subnet": "10.2.0.0/24"}]]});
        let bridge = Invoker::plugin_config(&list, &list.plugins[0], &Value::Null, &rc);
        assert_eq!(bridge["name"], "n");
        assert!(bridge.get("prevResult").is_none());
        assert!(bridge["runtimeConfig"].get("portMappings").is_none());
        assert_eq!(
            bridge["runtimeConfig"]["ipRanges"][0][0]["subnet"],
            "10.2.0.0/24"
        );
        let prev = json!({"ips": [{"address": "10.1.0.2/24"}]});
        let portmap = Invoker::plugin_config(&list, &list.plugins[1], &prev, &rc);
        assert_eq!(portmap["prevResult"], prev);
        assert_eq!(
            portmap["runtimeConfig"]["portMappings"][0]["hostPort"],
            8080
        );
    }

    #[test]
    fn the_builtin_bridge_takes_its_range_as_configured_and_no_runtime_ranges() {
        let list = NetworkList::builtin_bridge("br", "10.244.1.0/24", Path::new("/d"));
        let bridge = &list.plugins[0];
        assert_eq!(
            bridge["ipam"]["ranges"],
            json!([[{"subnet": "10.244.1.0/24"}]])
        );
        // host-local would prepend runtime ranges to the configured one: two range sets.
        let rc = json!({"ipRanges": [[{"subnet": "10.244.1.0/24"}]]});
        let conf = Invoker::plugin_config(&list, bridge, &Value::Null, &rc);
        assert!(
            conf.get("runtimeConfig")
                .is_none_or(|r| r.get("ipRanges").is_none()),
            "{conf}"
        );
    }

    #[test]
    fn result_ips_strip_prefix_and_put_ipv4_first() {
        let r = json!({"ips": [{"address": "fd00::5/64"}, {"address": "10.88.0.5/16"}]});
        assert_eq!(result_ips(&r), vec!["10.88.0.5", "fd00::5"]);
        assert!(result_ips(&Value::Null).is_empty());
    }

    #[test]
    fn plugin_errors_prefer_the_cni_error_message() {
        let e = plugin_error(
            "bad",
            Command::Add,
            br#"{"code":7,"msg":"no luck","details":"why"}"#,
            b"",
            Some(1),
        );
        assert_eq!(
            e.to_string(),
            "network: plugin bad failed (ADD): no luck: why"
        );
        let e = plugin_error("bad", Command::Add, b"", b"stderr text\n", Some(1));
        assert!(e.to_string().ends_with("stderr text"));
    }
}
