//! Applies one layer tar to an empty directory, turning OCI whiteouts into
//! overlayfs whiteouts, so that the directory can serve as an overlay lower.
//!
//! Safety rules, since a layer is hostile input:
//! - Entry names are cleaned lexically; a name whose `..` would climb above the
//!   layer root is refused. Leading `/` is ignored (names are always relative).
//! - Parent directories are resolved with openat2(RESOLVE_IN_ROOT), so a symlink
//!   met on the way (`evil -> /etc`, then `evil/passwd`) is followed *inside* the
//!   layer directory, as if it were `/`, never outside. Missing parents are
//!   created the same way.
//! - The final component is never followed: an existing entry there is removed
//!   and the new one created with O_EXCL/O_NOFOLLOW, mknodat, symlinkat, linkat.
//! - Hard link targets are resolved inside the layer the same way and must exist.
//! - Sizes are bounded by [`Limits`]; `trusted.*` xattrs from the archive are
//!   dropped so an image cannot forge overlayfs metadata (opaque, redirect).
//!
//! Whiteouts: `.wh.NAME` becomes a 0/0 character device NAME (unless NAME
//! exists in this same layer: OCI says whiteouts only hide lower layers);
//! `.wh..wh..opq` sets `trusted.overlay.opaque=y` on its directory; other
//! `.wh..wh.*` names (AUFS bookkeeping) are ignored.

use crate::error::IoContext;
use crate::sys;
use crate::tarball::{Header, Kind, Limits, TarReader};
use crate::Error;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

pub const WHITEOUT_PREFIX: &[u8] = b".wh.";
pub const OPAQUE_WHITEOUT: &[u8] = b".wh..wh..opq";
pub const OVERLAY_OPAQUE_XATTR: &[u8] = b"trusted.overlay.opaque";
const MAX_SYMLINK_FOLLOWS: usize = 40;
const PATH_MAX: usize = 4096;

/// What a layer occupies once unpacked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LayerStats {
    /// Sum of regular file sizes.
    pub bytes: u64,
    /// Entries created (files, dirs, links, devices, whiteouts).
    pub inodes: u64,
}

/// Unpacks the (uncompressed) tar stream `r` into the existing, empty
/// directory `dest`. The reader is left positioned after the end-of-archive
/// marker; callers that hash the stream should drain it afterwards.
pub fn unpack<R: Read>(r: &mut R, dest: &Path, limits: Limits) -> Result<LayerStats, Error> {
    let root =
        sys::open_dir_path(dest).ctx(|| format!("opening layer directory {}", dest.display()))?;
    let mut u = Unpacker {
        root,
        stats: LayerStats::default(),
        limits,
        dir_times: Vec::new(),
        privileged: sys::is_root(),
        buf: vec![0u8; 256 * 1024],
    };
    let mut tar = TarReader::new(r, limits);
    while let Some(h) = tar.next_header()? {
        u.entry(&h, &mut tar)?;
    }
    u.finish_dir_times();
    Ok(u.stats)
}

/// (path inside the layer, atime, mtime)
type DirTimes = (Vec<u8>, (i64, u32), (i64, u32));

struct Unpacker {
    root: OwnedFd,
    stats: LayerStats,
    limits: Limits,
    /// Directory times are set last: creating children would bump them again.
    dir_times: Vec<DirTimes>,
    privileged: bool,
    buf: Vec<u8>,
}

fn unsafe_entry(h: &Header, reason: impl Into<String>) -> Error {
    Error::UnsafeLayer {
        entry: h.display_name(),
        reason: reason.into(),
    }
}

/// Lexically cleans a tar name into components. `..` may not climb above the root.
pub(crate) fn clean_components(name: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if name.len() > PATH_MAX {
        return Err("name longer than PATH_MAX".into());
    }
    let mut out: Vec<Vec<u8>> = Vec::new();
    for c in name.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                if out.pop().is_none() {
                    return Err("path escapes the layer root".into());
                }
            }
            c => out.push(c.to_vec()),
        }
    }
    Ok(out)
}

fn join(comps: &[Vec<u8>]) -> Vec<u8> {
    comps.join(&b'/')
}

impl Unpacker {
    fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    fn entry<R: Read>(&mut self, h: &Header, tar: &mut TarReader<R>) -> Result<(), Error> {
        let comps = clean_components(&h.name).map_err(|r| unsafe_entry(h, r))?;
        let uid = u32::try_from(h.uid).map_err(|_| unsafe_entry(h, "uid out of range"))?;
        let gid = u32::try_from(h.gid).map_err(|_| unsafe_entry(h, "gid out of range"))?;
        let mtime = (h.mtime.sec, h.mtime.nsec);
        let atime = h.atime.map(|t| (t.sec, t.nsec)).unwrap_or(mtime);

        let Some((base, parent)) = comps.split_last() else {
            // The layer root itself ("./"): only a directory may describe it.
            if h.kind == Kind::Dir {
                let fd = sys::open_in_root(self.root(), b".", libc::O_RDONLY | libc::O_DIRECTORY)
                    .ctx(|| "opening layer root".to_string())?;
                self.apply_meta(fd.as_fd(), h, uid, gid)?;
                self.dir_times.push((Vec::new(), atime, mtime));
            }
            return Ok(());
        };

        // Whiteouts.
        if base.starts_with(WHITEOUT_PREFIX) {
            let pdir = self.mkdir_all(parent, h)?;
            if base.as_slice() == OPAQUE_WHITEOUT {
                let d = sys::openat(pdir.as_fd(), b".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
                    .ctx(|| format!("opening opaque directory for {}", h.display_name()))?;
                sys::fsetxattr(d.as_fd(), OVERLAY_OPAQUE_XATTR, b"y")
                    .ctx(|| format!("marking {} opaque", h.display_name()))?;
                return Ok(());
            }
            if base.starts_with(b".wh..wh.") {
                return Ok(());
            }
            let hidden = &base[WHITEOUT_PREFIX.len()..];
            if hidden.is_empty() || hidden == b"." || hidden == b".." {
                return Err(unsafe_entry(h, "malformed whiteout name"));
            }
            if sys::lstatat(pdir.as_fd(), hidden)
                .ctx(|| format!("checking {}", h.display_name()))?
                .is_some()
            {
                // Present in this very layer: a whiteout only hides lower layers.
                return Ok(());
            }
            sys::mknodat(pdir.as_fd(), hidden, libc::S_IFCHR, 0, 0)
                .ctx(|| format!("creating whiteout for {}", h.display_name()))?;
            self.stats.inodes += 1;
            return Ok(());
        }

        let pdir = self.mkdir_all(parent, h)?;
        let p = pdir.as_fd();
        let what = || h.display_name();
        match h.kind {
            Kind::Dir => {
                match sys::lstatat(p, base).ctx(|| format!("checking {}", what()))? {
                    Some(st) if sys::is_dir(&st) => {}
                    Some(_) => {
                        sys::unlinkat(p, base, false).ctx(|| format!("replacing {}", what()))?;
                        self.mkdir(p, base, h)?;
                    }
                    None => self.mkdir(p, base, h)?,
                }
                let fd = sys::openat(
                    p,
                    base,
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                    0,
                )
                .ctx(|| format!("opening directory {}", what()))?;
                self.apply_meta(fd.as_fd(), h, uid, gid)?;
                self.dir_times.push((join(&comps), atime, mtime));
            }
            Kind::File => {
                self.clear_slot(p, base, h)?;
                let total = self.stats.bytes.saturating_add(h.size);
                if total > self.limits.max_total_size {
                    return Err(unsafe_entry(
                        h,
                        format!(
                            "layer exceeds the {} byte size limit",
                            self.limits.max_total_size
                        ),
                    ));
                }
                let fd = sys::openat(
                    p,
                    base,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                    0o600,
                )
                .ctx(|| format!("creating {}", what()))?;
                let mut file = std::fs::File::from(fd);
                let mut data = tar.data();
                let mut written: u64 = 0;
                loop {
                    let n = match data.read(&mut self.buf) {
                        Ok(0) => break,
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                            return Err(Error::InvalidImage(format!(
                                "layer archive truncated inside {}",
                                what()
                            )))
                        }
                        Err(e) => {
                            return Err(Error::io(format!("reading {} from layer", what()), e))
                        }
                    };
                    file.write_all(&self.buf[..n])
                        .ctx(|| format!("writing {}", what()))?;
                    written += n as u64;
                }
                if written != h.size {
                    return Err(Error::InvalidImage(format!(
                        "layer archive truncated inside {}",
                        what()
                    )));
                }
                self.stats.bytes = total;
                self.stats.inodes += 1;
                self.apply_meta(file.as_fd(), h, uid, gid)?;
                sys::futimens(file.as_fd(), atime, mtime)
                    .ctx(|| format!("setting times of {}", what()))?;
            }
            Kind::Symlink => {
                if h.link.is_empty() {
                    return Err(unsafe_entry(h, "empty symlink target"));
                }
                self.clear_slot(p, base, h)?;
                // The target is stored verbatim: it is resolved inside the
                // container at run time, and we never follow it here.
                sys::symlinkat(&h.link, p, base).ctx(|| format!("creating symlink {}", what()))?;
                self.stats.inodes += 1;
                self.chown_at(p, base, uid, gid, h)?;
                sys::lutimensat(p, base, atime, mtime)
                    .ctx(|| format!("setting times of {}", what()))?;
            }
            Kind::HardLink => {
                let target = clean_components(&h.link)
                    .map_err(|r| unsafe_entry(h, format!("hard link target: {r}")))?;
                let Some((tbase, tparent)) = target.split_last() else {
                    return Err(unsafe_entry(h, "hard link to the layer root"));
                };
                let tdir = sys::open_in_root(
                    self.root(),
                    &join(tparent),
                    libc::O_PATH | libc::O_DIRECTORY,
                )
                .map_err(|e| unsafe_entry(h, format!("hard link target directory: {e}")))?;
                match sys::lstatat(tdir.as_fd(), tbase)
                    .ctx(|| format!("checking link target of {}", what()))?
                {
                    None => {
                        return Err(unsafe_entry(
                            h,
                            "hard link target does not exist in the layer",
                        ))
                    }
                    Some(st) if sys::is_dir(&st) => {
                        return Err(unsafe_entry(h, "hard link to a directory"))
                    }
                    Some(_) => {}
                }
                if target == comps {
                    return Ok(()); // a link to itself: nothing to do
                }
                self.clear_slot(p, base, h)?;
                sys::linkat(tdir.as_fd(), tbase, p, base)
                    .ctx(|| format!("creating hard link {}", what()))?;
            }
            Kind::Char | Kind::Block | Kind::Fifo => {
                self.clear_slot(p, base, h)?;
                let fmt = match h.kind {
                    Kind::Char => libc::S_IFCHR,
                    Kind::Block => libc::S_IFBLK,
                    _ => libc::S_IFIFO,
                };
                if let Err(e) =
                    sys::mknodat(p, base, fmt | (h.mode & 0o777), h.dev_major, h.dev_minor)
                {
                    if !self.privileged && fmt != libc::S_IFIFO {
                        tracing::warn!(entry = %what(), "skipping device node: not privileged");
                        return Ok(());
                    }
                    return Err(Error::io(format!("creating device {}", what()), e));
                }
                self.stats.inodes += 1;
                self.chown_at(p, base, uid, gid, h)?;
                sys::fchmodat(p, base, h.mode & 0o7777).ctx(|| format!("chmod {}", what()))?;
                sys::lutimensat(p, base, atime, mtime)
                    .ctx(|| format!("setting times of {}", what()))?;
            }
        }
        Ok(())
    }

    fn mkdir(&mut self, p: BorrowedFd<'_>, base: &[u8], h: &Header) -> Result<(), Error> {
        sys::mkdirat(p, base, 0o700).ctx(|| format!("creating directory {}", h.display_name()))?;
        self.stats.inodes += 1;
        Ok(())
    }

    /// Makes room for a non-directory entry: whatever is there goes, without being followed.
    fn clear_slot(&mut self, p: BorrowedFd<'_>, base: &[u8], h: &Header) -> Result<(), Error> {
        match sys::lstatat(p, base).ctx(|| format!("checking {}", h.display_name()))? {
            None => Ok(()),
            Some(st) if sys::is_dir(&st) => sys::remove_all_at(p, base)
                .ctx(|| format!("replacing directory {}", h.display_name())),
            Some(_) => {
                sys::unlinkat(p, base, false).ctx(|| format!("replacing {}", h.display_name()))
            }
        }
    }

    fn chown_at(
        &self,
        p: BorrowedFd<'_>,
        base: &[u8],
        uid: u32,
        gid: u32,
        h: &Header,
    ) -> Result<(), Error> {
        match sys::lchownat(p, base, uid, gid) {
            Ok(()) => Ok(()),
            Err(_) if !self.privileged => Ok(()),
            Err(e) => Err(Error::io(format!("chown {}", h.display_name()), e)),
        }
    }

    /// Owner, then mode (chown clears set-id bits), then xattrs, on an open fd.
    fn apply_meta(&self, fd: BorrowedFd<'_>, h: &Header, uid: u32, gid: u32) -> Result<(), Error> {
        if let Err(e) = sys::fchown(fd, uid, gid) {
            if self.privileged {
                return Err(Error::io(format!("chown {}", h.display_name()), e));
            }
        }
        sys::fchmod(fd, h.mode & 0o7777).ctx(|| format!("chmod {}", h.display_name()))?;
        for (name, value) in &h.xattrs {
            let allowed = name.starts_with(b"user.")
                || name.starts_with(b"security.")
                || name.as_slice() == b"system.posix_acl_access"
                || name.as_slice() == b"system.posix_acl_default";
            if !allowed {
                tracing::debug!(entry = %h.display_name(), xattr = %String::from_utf8_lossy(name), "dropping xattr");
                continue;
            }
            if let Err(e) = sys::fsetxattr(fd, name, value) {
                // Filesystems without xattr support, or an LSM saying no: the
                // file is still usable, so this is not fatal.
                tracing::debug!(entry = %h.display_name(), xattr = %String::from_utf8_lossy(name), error = %e, "cannot set xattr");
            }
        }
        Ok(())
    }

    /// Opens the directory `comps` inside the root, creating what is missing.
    /// Symlinks on the way are followed *within* the root (like securejoin):
    /// an absolute target restarts from the layer root, `..` stops at it.
    fn mkdir_all(&mut self, comps: &[Vec<u8>], h: &Header) -> Result<OwnedFd, Error> {
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        match sys::open_in_root(self.root(), &join(comps), flags) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(unsafe_entry(h, format!("parent directory: {e}"))),
        }
        let mut todo: std::collections::VecDeque<Vec<u8>> = comps.iter().cloned().collect();
        let mut cur: Vec<Vec<u8>> = Vec::new();
        let mut follows = 0;
        while let Some(c) = todo.pop_front() {
            match c.as_slice() {
                b"" | b"." => continue,
                b".." => {
                    cur.pop();
                    continue;
                }
                _ => {}
            }
            let dir = sys::open_in_root(self.root(), &join(&cur), flags)
                .map_err(|e| unsafe_entry(h, format!("parent directory: {e}")))?;
            match sys::lstatat(dir.as_fd(), &c)
                .ctx(|| format!("resolving parent of {}", h.display_name()))?
            {
                Some(st) if sys::is_dir(&st) => cur.push(c),
                Some(st) if sys::is_symlink(&st) => {
                    follows += 1;
                    if follows > MAX_SYMLINK_FOLLOWS {
                        return Err(unsafe_entry(h, "too many symlinks in parent path"));
                    }
                    let target = sys::readlinkat(dir.as_fd(), &c)
                        .ctx(|| format!("reading symlink in {}", h.display_name()))?;
                    if target.starts_with(b"/") {
                        cur.clear();
                    }
                    for t in target.split(|&b| b == b'/').rev() {
                        todo.push_front(t.to_vec());
                    }
                }
                Some(_) => {
                    return Err(unsafe_entry(
                        h,
                        "a parent path component is not a directory",
                    ))
                }
                None => {
                    sys::mkdirat(dir.as_fd(), &c, 0o755)
                        .ctx(|| format!("creating parent of {}", h.display_name()))?;
                    // Explicit: the daemon's umask (0o077) would leave it 0700, and a
                    // container running as another user could not pass through it.
                    sys::fchmodat(dir.as_fd(), &c, 0o755)
                        .ctx(|| format!("chmod parent of {}", h.display_name()))?;
                    self.stats.inodes += 1;
                    cur.push(c);
                }
            }
            if join(&cur).len() > PATH_MAX {
                return Err(unsafe_entry(h, "resolved path longer than PATH_MAX"));
            }
        }
        sys::open_in_root(self.root(), &join(&cur), flags)
            .map_err(|e| unsafe_entry(h, format!("parent directory: {e}")))
    }

    fn finish_dir_times(&mut self) {
        for (path, atime, mtime) in self.dir_times.drain(..).rev() {
            // Best effort: the directory may have been replaced by a later entry.
            if let Ok(fd) = sys::open_in_root(
                self.root.as_fd(),
                &path,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            ) {
                let _ = sys::futimens(fd.as_fd(), atime, mtime);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

    /// Hand-made ustar headers, so tests can say things `tar::Builder` refuses to.
    struct RawTar(Vec<u8>);

    impl RawTar {
        fn new() -> Self {
            RawTar(Vec::new())
        }
        fn header(
            &mut self,
            name: &[u8],
            typeflag: u8,
            link: &[u8],
            size_field: Option<[u8; 12]>,
            data: &[u8],
            mode: u32,
        ) {
            let mut h = [0u8; 512];
            h[..name.len()].copy_from_slice(name);
            h[100..108].copy_from_slice(format!("{mode:07o}\0").as_bytes());
            h[108..116].copy_from_slice(b"0000000\0");
            h[116..124].copy_from_slice(b"0000000\0");
            match size_field {
                Some(f) => h[124..136].copy_from_slice(&f),
                None => h[124..136].copy_from_slice(format!("{:011o}\0", data.len()).as_bytes()),
            }
            h[136..148].copy_from_slice(b"00000000000\0");
            h[156] = typeflag;
            h[157..157 + link.len()].copy_from_slice(link);
            h[257..263].copy_from_slice(b"ustar\0");
            h[263..265].copy_from_slice(b"00");
            h[148..156].copy_from_slice(b"        ");
            let sum: u64 = h.iter().map(|&b| b as u64).sum();
            h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
            self.0.extend_from_slice(&h);
            self.0.extend_from_slice(data);
            let pad = (512 - data.len() % 512) % 512;
            self.0.extend(std::iter::repeat_n(0u8, pad));
        }
        fn file(mut self, name: &str, data: &[u8]) -> Self {
            self.header(name.as_bytes(), b'0', b"", None, data, 0o644);
            self
        }
        fn dir(mut self, name: &str) -> Self {
            self.header(name.as_bytes(), b'5', b"", None, b"", 0o755);
            self
        }
        fn symlink(mut self, name: &str, target: &str) -> Self {
            self.header(name.as_bytes(), b'2', target.as_bytes(), None, b"", 0o777);
            self
        }
        fn hardlink(mut self, name: &str, target: &str) -> Self {
            self.header(name.as_bytes(), b'1', target.as_bytes(), None, b"", 0o644);
            self
        }
        fn finish(mut self) -> Vec<u8> {
            self.0.extend_from_slice(&[0u8; 1024]);
            self.0
        }
    }

    /// A sandbox: `base/layer` is the unpack target, `base/outside` a
    /// directory next to it that nothing may touch.
    struct Sandbox {
        _tmp: tempfile::TempDir,
        layer: std::path::PathBuf,
        outside: std::path::PathBuf,
    }

    fn sandbox() -> Sandbox {
        let tmp = tempfile::tempdir().unwrap();
        let layer = tmp.path().join("layer");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&layer).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"keep").unwrap();
        Sandbox {
            _tmp: tmp,
            layer,
            outside,
        }
    }

    fn run(sb: &Sandbox, tar: &[u8]) -> Result<LayerStats, Error> {
        unpack(&mut &tar[..], &sb.layer, Limits::default())
    }

    fn assert_outside_untouched(sb: &Sandbox) {
        let names: Vec<_> = std::fs::read_dir(&sb.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            names,
            vec!["secret".to_string()],
            "something landed outside"
        );
        assert_eq!(std::fs::read(sb.outside.join("secret")).unwrap(), b"keep");
        let parent: Vec<_> = std::fs::read_dir(sb.layer.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            parent.len(),
            2,
            "unexpected entries next to the layer: {parent:?}"
        );
    }

    #[test]
    fn dotdot_escape_is_refused() {
        let sb = sandbox();
        let tar = RawTar::new().file("a/../../outside/pwned", b"x").finish();
        let err = run(&sb, &tar).unwrap_err();
        assert!(matches!(err, Error::UnsafeLayer { .. }), "{err}");
        let tar = RawTar::new()
            .file("../outside/secret", b"overwritten")
            .finish();
        assert!(run(&sb, &tar).is_err());
        assert_outside_untouched(&sb);
    }

    #[test]
    fn absolute_names_land_inside() {
        let sb = sandbox();
        let abs = format!("{}/pwned", sb.outside.display());
        let tar = RawTar::new()
            .file(&abs, b"x")
            .file("/etc/passwd", b"root")
            .finish();
        run(&sb, &tar).unwrap();
        assert_outside_untouched(&sb);
        let inside = sb.layer.join(abs.trim_start_matches('/'));
        assert_eq!(std::fs::read(inside).unwrap(), b"x");
        assert_eq!(std::fs::read(sb.layer.join("etc/passwd")).unwrap(), b"root");
    }

    #[test]
    fn writes_through_symlinks_stay_inside() {
        let sb = sandbox();
        let outside = sb.outside.display().to_string();
        let tar = RawTar::new()
            // absolute symlink to the real outside dir, then a file through it
            .symlink("evil", &outside)
            .file("evil/pwned", b"x")
            // relative symlink climbing out, then a file through it
            .symlink("up", "../../../../../../../..")
            .file(&format!("up{outside}/pwned2"), b"y")
            // overwrite the secret through a symlink to it
            .symlink("s", &format!("{outside}/secret"))
            .file("s", b"replaced the link, not the target")
            .finish();
        run(&sb, &tar).unwrap();
        assert_outside_untouched(&sb);
        // Both writes were re-rooted at the layer directory.
        for (name, content) in [("pwned", b"x"), ("pwned2", b"y")] {
            let rerooted = format!("{}/{name}", outside.trim_start_matches('/'));
            assert_eq!(std::fs::read(sb.layer.join(rerooted)).unwrap(), content);
        }
        // The symlinks themselves are kept verbatim.
        assert_eq!(
            std::fs::read_link(sb.layer.join("evil"))
                .unwrap()
                .display()
                .to_string(),
            outside
        );
        assert!(std::fs::symlink_metadata(sb.layer.join("s"))
            .unwrap()
            .is_file());
    }

    #[test]
    fn hardlinks_out_are_refused() {
        let sb = sandbox();
        let secret = format!("{}/secret", sb.outside.display());
        // absolute target: re-rooted, does not exist inside -> refused
        let tar = RawTar::new().hardlink("h", &secret).finish();
        assert!(matches!(run(&sb, &tar), Err(Error::UnsafeLayer { .. })));
        // relative escape
        let tar = RawTar::new().hardlink("h2", "../outside/secret").finish();
        assert!(matches!(run(&sb, &tar), Err(Error::UnsafeLayer { .. })));
        // through a symlinked parent: resolved inside, does not exist -> refused
        let tar = RawTar::new()
            .symlink("o", &sb.outside.display().to_string())
            .hardlink("h3", "o/secret")
            .finish();
        assert!(run(&sb, &tar).is_err());
        // a link to a symlink links the symlink itself, never its target
        let tar = RawTar::new()
            .symlink("l", &secret)
            .hardlink("h4", "l")
            .finish();
        let sb2 = sandbox();
        run(&sb2, &tar).unwrap();
        assert!(std::fs::symlink_metadata(sb2.layer.join("h4"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::metadata(sb.outside.join("secret"))
                .unwrap()
                .nlink(),
            1
        );
        assert_outside_untouched(&sb);
        assert_outside_untouched(&sb2);
    }

    #[test]
    fn huge_size_headers_are_bounded() {
        let sb = sandbox();
        // base-256 size of 2^62 bytes: refused before anything is written
        let mut f = [0u8; 12];
        f[0] = 0x80;
        f[4] = 0x40;
        let mut t = RawTar::new();
        t.header(b"big", b'0', b"", Some(f), b"", 0o644);
        let err = run(&sb, &t.finish()).unwrap_err();
        assert!(matches!(err, Error::UnsafeLayer { .. }), "{err}");
        assert!(!sb.layer.join("big").exists());
        // an octal size larger than the data that follows: truncated archive
        let sb2 = sandbox();
        let mut t = RawTar::new();
        t.header(b"short", b'0', b"", Some(*b"77777777777\0"), b"abc", 0o644);
        let err = run(&sb2, &t.0).unwrap_err();
        assert!(matches!(err, Error::InvalidImage(_)), "{err}");
        // a total budget smaller than the sum of files
        let sb3 = sandbox();
        let tar = RawTar::new()
            .file("a", &[1u8; 600])
            .file("b", &[2u8; 600])
            .finish();
        let limits = Limits {
            max_total_size: 1000,
            ..Limits::default()
        };
        assert!(unpack(&mut &tar[..], &sb3.layer, limits).is_err());
        // an oversized PAX header is refused without reading it into memory
        let sb4 = sandbox();
        let mut t = RawTar::new();
        t.header(b"pax", b'x', b"", Some(*b"77777777777\0"), b"", 0o644);
        assert!(matches!(run(&sb4, &t.0), Err(Error::UnsafeLayer { .. })));
        for s in [&sb, &sb2, &sb3, &sb4] {
            assert_outside_untouched(s);
        }
    }

    #[test]
    fn whiteouts_become_overlay_whiteouts() {
        let sb = sandbox();
        let tar = RawTar::new()
            .dir("etc/")
            .file("etc/.wh.motd", b"")
            .dir("var/cache/")
            .file("var/cache/.wh..wh..opq", b"")
            .file("var/cache/kept", b"new")
            .file(".wh.gone-dir", b"")
            .file("both", b"here")
            .file(".wh.both", b"")
            .file("deep/missing/.wh.x", b"")
            .file("a/.wh..wh.plnk", b"")
            .finish();
        let stats = run(&sb, &tar).unwrap();
        let wh = |p: &str| {
            let m = std::fs::symlink_metadata(sb.layer.join(p)).unwrap();
            assert!(m.file_type().is_char_device(), "{p} not a char device");
            assert_eq!(m.rdev(), 0, "{p} not 0/0");
        };
        wh("etc/motd");
        wh("gone-dir");
        wh("deep/missing/x");
        assert!(!sb.layer.join("etc/.wh.motd").exists());
        assert!(!sb.layer.join("a/.wh..wh.plnk").exists());
        // same-layer file wins over its whiteout
        assert_eq!(std::fs::read(sb.layer.join("both")).unwrap(), b"here");
        let d = std::fs::File::open(sb.layer.join("var/cache")).unwrap();
        assert_eq!(
            sys::fgetxattr(d.as_fd(), OVERLAY_OPAQUE_XATTR)
                .unwrap()
                .as_deref(),
            Some(&b"y"[..])
        );
        assert_eq!(
            std::fs::read(sb.layer.join("var/cache/kept")).unwrap(),
            b"new"
        );
        assert!(!sb.layer.join("var/cache/.wh..wh..opq").exists());
        assert!(stats.inodes >= 8);
    }

    #[test]
    fn metadata_is_kept() {
        let sb = sandbox();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(3);
        h.set_mode(0o4755);
        h.set_uid(1234);
        h.set_gid(5678);
        h.set_mtime(1_000_000);
        b.append_data(&mut h, "usr/bin/suid", &b"abc"[..]).unwrap();
        let mut d = tar::Header::new_gnu();
        d.set_entry_type(tar::EntryType::Directory);
        d.set_size(0);
        d.set_mode(0o1777);
        d.set_mtime(2_000_000);
        b.append_data(&mut d, "tmp/", &b""[..]).unwrap();
        // a name longer than 100 bytes goes through a GNU long-name record
        let long = format!("{}/f", "x".repeat(150));
        let mut l = tar::Header::new_gnu();
        l.set_size(1);
        l.set_mode(0o600);
        b.append_data(&mut l, &long, &b"1"[..]).unwrap();
        let tar = b.into_inner().unwrap();
        run(&sb, &tar).unwrap();
        let m = std::fs::metadata(sb.layer.join("usr/bin/suid")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o4755);
        assert_eq!((m.uid(), m.gid()), (1234, 5678));
        assert_eq!(m.mtime(), 1_000_000);
        let t = std::fs::metadata(sb.layer.join("tmp")).unwrap();
        assert_eq!(t.permissions().mode() & 0o7777, 0o1777);
        assert_eq!(t.mtime(), 2_000_000);
        assert_eq!(std::fs::read(sb.layer.join(&long)).unwrap(), b"1");
    }

    #[test]
    fn later_entries_replace_earlier_ones() {
        let sb = sandbox();
        let tar = RawTar::new()
            .dir("x/")
            .file("x/inner", b"1")
            .file("x", b"now a file")
            .symlink("y", "/nowhere")
            .dir("y/")
            .file("y/z", b"2")
            .finish();
        run(&sb, &tar).unwrap();
        assert_eq!(std::fs::read(sb.layer.join("x")).unwrap(), b"now a file");
        assert!(std::fs::symlink_metadata(sb.layer.join("y"))
            .unwrap()
            .is_dir());
        assert_eq!(std::fs::read(sb.layer.join("y/z")).unwrap(), b"2");
    }

    fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
        // "<len> key=value\n" where len counts itself
        let body_len = 1 + key.len() + 1 + value.len() + 1;
        let mut len = body_len + 1;
        while len.to_string().len() + body_len != len {
            len += 1;
        }
        let mut r = format!("{len} {key}=").into_bytes();
        r.extend_from_slice(value);
        r.push(b'\n');
        r
    }

    #[test]
    fn xattrs_from_pax_but_never_trusted_ones() {
        let sb = sandbox();
        let mut t = RawTar::new();
        let mut recs = pax_record("SCHILY.xattr.trusted.overlay.opaque", b"y");
        recs.extend(pax_record("SCHILY.xattr.trusted.overlay.redirect", b"/etc"));
        recs.extend(pax_record("SCHILY.xattr.user.note", b"hello"));
        recs.extend(pax_record("path", b"dir-with-a-name-from-pax"));
        t.header(b"PaxHeaders/x", b'x', b"", None, &recs, 0o644);
        t.header(b"short", b'5', b"", None, b"", 0o755);
        run(&sb, &t.finish()).unwrap();
        let d = std::fs::File::open(sb.layer.join("dir-with-a-name-from-pax")).unwrap();
        assert_eq!(
            sys::fgetxattr(d.as_fd(), OVERLAY_OPAQUE_XATTR).unwrap(),
            None
        );
        assert_eq!(
            sys::fgetxattr(d.as_fd(), b"trusted.overlay.redirect").unwrap(),
            None
        );
        // user.* xattrs are kept where the filesystem has them.
        if let Ok(v) = sys::fgetxattr(d.as_fd(), b"user.note") {
            assert!(v.is_none() || v.as_deref() == Some(&b"hello"[..]));
        }
        assert!(!sb.layer.join("short").exists());
    }

    /// Truncated and bit-flipped archives must fail cleanly (no panic) and
    /// never write outside the layer.
    #[test]
    fn garbage_never_panics_or_escapes() {
        let good = RawTar::new()
            .dir("d/")
            .file("d/f", &[7u8; 700])
            .symlink("d/l", "../../..")
            .hardlink("d/h", "d/f")
            .file("d/.wh.x", b"")
            .finish();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..600 {
            let sb = sandbox();
            let mut data = good.clone();
            if round % 3 == 0 {
                data.truncate((next() as usize) % good.len());
            } else {
                for _ in 0..(1 + round % 8) {
                    let i = (next() as usize) % data.len();
                    data[i] = next() as u8;
                }
                // Re-seal header checksums so the damage reaches the extractor.
                for block in data.chunks_mut(512) {
                    if block.len() == 512 && &block[257..262] == b"ustar" {
                        block[148..156].copy_from_slice(b"        ");
                        let sum: u64 = block.iter().map(|&b| b as u64).sum();
                        block[148..156].copy_from_slice(format!("{:06o}\0 ", sum).as_bytes());
                    }
                }
            }
            let _ = run(&sb, &data);
            assert_outside_untouched(&sb);
        }
    }

    #[test]
    fn clean_components_table() {
        let c =
            |s: &str| clean_components(s.as_bytes()).map(|v| String::from_utf8(join(&v)).unwrap());
        assert_eq!(c("./a/b/").unwrap(), "a/b");
        assert_eq!(c("/a//b/./c").unwrap(), "a/b/c");
        assert_eq!(c("a/b/../c").unwrap(), "a/c");
        assert_eq!(c("./").unwrap(), "");
        assert!(c("..").is_err());
        assert!(c("a/../../b").is_err());
    }
}
