//! Task events to containerd: each event is forwarded, in order, to containerd's ttrpc events
//! service (`containerd.services.events.ttrpc.v1.Events/Forward` at `TTRPC_ADDRESS`, which
//! containerd sets in the shim's environment). containerd's CRI plugin acts on them: TaskExit
//! ends a container, TaskOOM makes its reason OOMKilled.
//!
//! A publisher task owns the connection: when containerd is down (restarting), it reconnects
//! and retries with backoff for a bounded time, so an event is neither lost to a short restart
//! nor able to grow the queue without bound.

use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim_protos::protobuf::{Message, MessageDyn, MessageField};
use containerd_shim_protos::shim::event::Envelope;
use containerd_shim_protos::shim::events::ForwardRequest;
use containerd_shim_protos::shim_async::{Client, EventsClient};
use peapod_host::timefmt;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Events waiting to be delivered; past this, new events are dropped (and said so).
const QUEUE: usize = 1024;
/// How long one event is retried while containerd cannot be reached.
const RETRY_FOR: Duration = Duration::from_secs(120);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

struct Event {
    topic: &'static str,
    timestamp: i64,
    any: Any,
    /// Told once containerd has taken the event (dropped if it never did).
    delivered: Option<oneshot::Sender<()>>,
}

/// The sending side; cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    tx: Option<mpsc::Sender<Event>>,
}

impl Publisher {
    /// A publisher for containerd's ttrpc address (none: events are not sent).
    pub fn start(ttrpc_address: Option<String>, namespace: String) -> Publisher {
        let Some(address) = ttrpc_address.filter(|a| !a.is_empty()) else {
            return Publisher { tx: None };
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(deliver(address, namespace, rx));
        Publisher { tx: Some(tx) }
    }

    /// Queues `event` under `topic` (a `containerd_shim_protos::topics` constant).
    pub fn publish<M: Message + MessageDyn>(&self, topic: &'static str, event: &M) {
        self.queue(topic, event, None);
    }

    /// [`Publisher::publish`], and a receiver answered once containerd has taken the event; it
    /// errs if the event was dropped or never delivered. None without a containerd to send to.
    pub fn publish_confirmed<M: Message + MessageDyn>(
        &self,
        topic: &'static str,
        event: &M,
    ) -> Option<oneshot::Receiver<()>> {
        self.tx.as_ref()?;
        let (delivered, confirmed) = oneshot::channel();
        self.queue(topic, event, Some(delivered));
        Some(confirmed)
    }

    fn queue<M: Message + MessageDyn>(
        &self,
        topic: &'static str,
        event: &M,
        delivered: Option<oneshot::Sender<()>>,
    ) {
        let Some(tx) = &self.tx else { return };
        let value = match event.write_to_bytes() {
            Ok(v) => v,
            Err(err) => {
                eprintln!("containerd-shim-peapod-v2: encode event {topic}: {err}");
                return;
            }
        };
        let mut any = Any::new();
        // containerd resolves event types by their protobuf name (containerd.events.TaskExit).
        any.type_url = event.descriptor_dyn().full_name().to_string();
        any.value = value;
        let queued = tx.try_send(Event {
            topic,
            timestamp: timefmt::now_ns(),
            any,
            delivered,
        });
        if queued.is_err() {
            eprintln!("containerd-shim-peapod-v2: event queue full, dropped {topic}");
        }
    }
}

fn timestamp(ns: i64) -> Timestamp {
    let mut ts = Timestamp::new();
    ts.seconds = ns.div_euclid(1_000_000_000);
    ts.nanos = ns.rem_euclid(1_000_000_000) as i32;
    ts
}

async fn connect(address: &str) -> Option<EventsClient> {
    let address = if address.contains("://") {
        address.to_string()
    } else {
        format!("unix://{address}")
    };
    Client::connect(&address).await.ok().map(EventsClient::new)
}

async fn deliver(address: String, namespace: String, mut rx: mpsc::Receiver<Event>) {
    let mut client: Option<EventsClient> = None;
    while let Some(mut event) = rx.recv().await {
        let mut envelope = Envelope::new();
        envelope.timestamp = MessageField::some(timestamp(event.timestamp));
        envelope.namespace = namespace.clone();
        envelope.topic = event.topic.to_string();
        envelope.event = MessageField::some(std::mem::take(&mut event.any));
        let mut req = ForwardRequest::new();
        req.envelope = MessageField::some(envelope);
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        let mut backoff = Duration::from_millis(50);
        loop {
            if client.is_none() {
                client = connect(&address).await;
            }
            if let Some(c) = &client {
                let mut ctx = ttrpc::context::with_timeout(REQUEST_TIMEOUT.as_nanos() as i64);
                ctx.add("containerd-namespace".into(), namespace.clone());
                match c.forward(ctx, &req).await {
                    Ok(_) => {
                        if let Some(delivered) = event.delivered.take() {
                            let _ = delivered.send(());
                        }
                        break;
                    }
                    Err(_) => client = None,
                }
            }
            if tokio::time::Instant::now() > deadline {
                eprintln!(
                    "containerd-shim-peapod-v2: could not deliver {} to {address}",
                    event.topic
                );
                break;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }
}
