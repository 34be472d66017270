//! What the shim and a container's resident exec helper ([`crate::resident`]) say to each
//! other over their socket pair: a message is a little-endian u32 length and that many bytes
//! of JSON, and descriptors (an exec's stdin, stdout and stderr) ride on its first byte as
//! SCM_RIGHTS. One request, then its reply, in turn; the helper speaks first, once, to say it
//! is in the container (or why it is not).

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// The largest message either side accepts (a process spec with a large environment).
pub const MAX_MESSAGE: usize = 16 << 20;
/// Descriptors one message may carry.
const MAX_FDS: usize = 4;

/// The helper's answers.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Reply {
    /// In the container's cgroups and namespaces, waiting for execs.
    Ready,
    /// The exec's process has exec'd its program; its host pid (the shim is its parent).
    Started { pid: i32 },
    /// Nothing was started, and why (runc's wording where runc has one).
    Failed { message: String },
}

fn invalid(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// Sends one message with `fds` attached.
pub fn send(sock: &mut UnixStream, bytes: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|n| (*n as usize) <= MAX_MESSAGE)
        .ok_or_else(|| invalid(format!("a message of {} bytes", bytes.len())))?
        .to_le_bytes();
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    // The first byte alone carries the descriptors; the rest is ordinary writes.
    let sent = sendmsg::<()>(
        sock.as_raw_fd(),
        &[IoSlice::new(&len[..1])],
        cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    if sent != 1 {
        return Err(std::io::ErrorKind::WriteZero.into());
    }
    sock.write_all(&len[1..])?;
    sock.write_all(bytes)
}

/// Receives one message and its descriptors (close-on-exec); `None` at end of stream.
pub fn recv(sock: &mut UnixStream) -> std::io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut len = [0u8; 4];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut fds = Vec::new();
    let got = {
        let mut iov = [IoSliceMut::new(&mut len[..1])];
        let msg = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )?;
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(received) = c {
                // SAFETY: descriptors the kernel just installed in this process for us.
                fds.extend(
                    received
                        .into_iter()
                        .map(|f| unsafe { OwnedFd::from_raw_fd(f) }),
                );
            }
        }
        if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
            return Err(invalid("more descriptors than a message may carry".into()));
        }
        msg.bytes
    };
    if got == 0 {
        return Ok(None);
    }
    sock.read_exact(&mut len[1..])?;
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_MESSAGE {
        return Err(invalid(format!("a message of {n} bytes")));
    }
    let mut bytes = vec![0; n];
    sock.read_exact(&mut bytes)?;
    Ok(Some((bytes, fds)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Seek;

    #[test]
    fn messages_and_their_descriptors_arrive_whole() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"through the socket").unwrap();
        let big = vec![b'x'; 300_000];
        // Larger than the socket's buffer: the sender waits for the reader.
        let sender = std::thread::spawn({
            let big = big.clone();
            move || {
                send(&mut a, &big, &[file.as_raw_fd()]).unwrap();
                send(&mut a, b"second", &[]).unwrap();
            }
        });
        let (bytes, fds) = recv(&mut b).unwrap().unwrap();
        assert_eq!(bytes, big);
        assert_eq!(fds.len(), 1);
        let mut received = std::fs::File::from(fds.into_iter().next().unwrap());
        received.rewind().unwrap();
        let mut text = String::new();
        received.read_to_string(&mut text).unwrap();
        assert_eq!(text, "through the socket");
        let (bytes, fds) = recv(&mut b).unwrap().unwrap();
        assert_eq!((bytes.as_slice(), fds.len()), (&b"second"[..], 0));
        sender.join().unwrap();
        assert!(recv(&mut b).unwrap().is_none(), "end of stream");
    }

    #[test]
    fn replies_are_tagged_json() {
        let json = serde_json::to_string(&Reply::Started { pid: 42 }).unwrap();
        assert_eq!(json, r#"{"started":{"pid":42}}"#);
        assert_eq!(serde_json::to_string(&Reply::Ready).unwrap(), r#""ready""#);
        let back: Reply = serde_json::from_str(&json).unwrap();
        assert_eq!(back, Reply::Started { pid: 42 });
    }
}
