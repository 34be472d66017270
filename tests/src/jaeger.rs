//! A real trace collector for the tracing tests: Jaeger v2 (`cmd/jaeger`, the OpenTelemetry
//! collector with Jaeger's storage and query API), built by `scripts/jaeger` (which
//! `scripts/setup` runs) into a cache outside the tree, run on loopback ports of its own with
//! memory storage: an OTLP/gRPC receiver and the query API (`/api/traces`) the tests read.
//! Dropping it kills the process.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The jaeger binary; panics, saying how to get it, when it was not built: a test that needs
/// it must not pass without it.
pub fn bin() -> PathBuf {
    crate::registry_clients::built_by("jaeger", "jaeger")
}

/// A free loopback port (bound and let go: Jaeger binds it a moment later; a clash makes
/// [`Jaeger::start`] try other ports).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().expect("its address").port()
}

pub struct Jaeger {
    child: Child,
    dir: tempfile::TempDir,
    /// The OTLP/gRPC receiver, `127.0.0.1:PORT`: what `[tracing] endpoint` names.
    pub otlp: String,
    /// The query API's HTTP address, `127.0.0.1:PORT`.
    pub query: String,
}

impl Jaeger {
    /// Starts Jaeger and waits until its receiver and query API both accept connections.
    pub fn start() -> Jaeger {
        let bin = bin();
        let mut last = String::new();
        for _ in 0..5 {
            match Self::try_start(&bin) {
                Ok(j) => return j,
                Err(e) => last = e,
            }
        }
        panic!("jaeger did not start: {last}");
    }

    fn try_start(bin: &std::path::Path) -> Result<Jaeger, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (otlp, query, query_grpc) = (free_port(), free_port(), free_port());
        // Only what the tests use, every listener on loopback: OTLP/gRPC in, memory storage,
        // the query API; no metrics listener, no other receiver.
        let config = format!(
            r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    # Jaeger traces its own queries by default, to an OTLP collector on the default port.
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"#
        );
        let config_path = dir.path().join("jaeger.yaml");
        std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
        let log =
            std::fs::File::create(dir.path().join("jaeger.log")).map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("run {}: {e}", bin.display()))?;
        let mut j = Jaeger {
            child,
            dir,
            otlp: format!("127.0.0.1:{otlp}"),
            query: format!("127.0.0.1:{query}"),
        };
        let deadline = Instant::now() + crate::scaled(Duration::from_secs(30));
        loop {
            if let Ok(Some(status)) = j.child.try_wait() {
                return Err(format!("jaeger exited ({status}):\n{}", j.log()));
            }
            let up = |a: &str| TcpStream::connect(a).is_ok();
            if up(&j.otlp) && up(&j.query) && j.get("/api/services").is_ok() {
                return Ok(j);
            }
            if Instant::now() > deadline {
                return Err(format!("jaeger did not serve within 30 s:\n{}", j.log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Jaeger's own log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("jaeger.log")).unwrap_or_default()
    }

    /// GET `path` of the query API: the JSON body of a 200, or why not.
    pub fn get(&self, path: &str) -> Result<Value, String> {
        let mut s = TcpStream::connect(&self.query).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        // HTTP/1.0: the body ends with the connection, never chunked.
        write!(s, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.query)
            .map_err(|e| e.to_string())?;
        let mut page = Vec::new();
        s.read_to_end(&mut page).map_err(|e| e.to_string())?;
        let page = String::from_utf8_lossy(&page);
        let (head, body) = page
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("not HTTP: {page}"))?;
        if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
            return Err(format!("{path}: {head}\n{body}"));
        }
        serde_json::from_str(body).map_err(|e| format!("{path}: {e}: {body}"))
    }

    /// The trace `trace_id` (32 hex digits) as Jaeger's query API gives it, once it holds
    /// spans for which `complete` is true, waiting up to `limit` (the exporters send in
    /// batches, every few seconds); panics with what it has otherwise.
    pub fn wait_trace(
        &self,
        trace_id: &str,
        limit: Duration,
        complete: impl Fn(&Trace) -> bool,
    ) -> Trace {
        let deadline = Instant::now() + crate::scaled(limit);
        let mut last = String::new();
        loop {
            match self.get(&format!("/api/traces/{trace_id}")) {
                Ok(v) => {
                    if let Some(t) = v["data"].get(0).map(Trace::from) {
                        if complete(&t) {
                            return t;
                        }
                        last = format!("{t:#?}");
                    }
                }
                Err(e) => last = e,
            }
            assert!(
                Instant::now() < deadline,
                "trace {trace_id} not complete in Jaeger within {limit:?}; last seen:\n{last}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The traces of `service` Jaeger holds (at most 100), each whole.
    pub fn traces_of(&self, service: &str) -> Vec<Trace> {
        match self.get(&format!(
            "/api/traces?service={service}&limit=100&lookback=1h"
        )) {
            Ok(v) => v["data"]
                .as_array()
                .map(|a| a.iter().map(Trace::from).collect())
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// The services Jaeger has spans of.
    pub fn services(&self) -> Vec<String> {
        self.get("/api/services")
            .ok()
            .and_then(|v| v["data"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One span of a trace, as Jaeger gives it.
#[derive(Debug, Clone)]
pub struct Span {
    pub span_id: String,
    /// The span it is CHILD_OF (empty for a root).
    pub parent: String,
    pub operation: String,
    pub service: String,
    /// Its tags (OpenTelemetry attributes and the exporter's own), as strings.
    pub tags: Vec<(String, String)>,
    pub start_us: u64,
    pub duration_us: u64,
}

impl Span {
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A trace: its id and spans.
#[derive(Debug, Clone)]
pub struct Trace {
    pub trace_id: String,
    pub spans: Vec<Span>,
}

impl Trace {
    fn from(v: &Value) -> Trace {
        let processes = &v["processes"];
        let spans = v["spans"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|s| Span {
                span_id: s["spanID"].as_str().unwrap_or_default().to_string(),
                parent: s["references"]
                    .as_array()
                    .and_then(|r| r.iter().find(|r| r["refType"] == "CHILD_OF"))
                    .and_then(|r| r["spanID"].as_str())
                    .unwrap_or_default()
                    .to_string(),
                operation: s["operationName"].as_str().unwrap_or_default().to_string(),
                service: s["processID"]
                    .as_str()
                    .and_then(|p| processes[p]["serviceName"].as_str())
                    .unwrap_or_default()
                    .to_string(),
                tags: s["tags"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|t| {
                        let value = match &t["value"] {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (t["key"].as_str().unwrap_or_default().to_string(), value)
                    })
                    .collect(),
                start_us: s["startTime"].as_u64().unwrap_or(0),
                duration_us: s["duration"].as_u64().unwrap_or(0),
            })
            .collect();
        Trace {
            trace_id: v["traceID"].as_str().unwrap_or_default().to_string(),
            spans,
        }
    }

    /// The spans named `operation`.
    pub fn named<'a>(&'a self, operation: &'a str) -> impl Iterator<Item = &'a Span> + 'a {
        self.spans.iter().filter(move |s| s.operation == operation)
    }

    /// The one span named `operation` (panics, printing the trace, when there is none or
    /// several).
    pub fn one<'a>(&'a self, operation: &str) -> &'a Span {
        let found: Vec<&Span> = self
            .spans
            .iter()
            .filter(|s| s.operation == operation)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{} spans named {operation:?} in trace {}: {self:#?}",
            found.len(),
            self.trace_id
        );
        found[0]
    }

    /// Whether span `id` is `ancestor` or descends from it.
    pub fn descends_from(&self, id: &str, ancestor: &str) -> bool {
        let mut cur = id.to_string();
        for _ in 0..64 {
            if cur == ancestor {
                return true;
            }
            match self.spans.iter().find(|s| s.span_id == cur) {
                Some(s) if !s.parent.is_empty() => cur = s.parent.clone(),
                _ => return false,
            }
        }
        false
    }
}
