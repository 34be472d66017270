//! Capabilities by name, and the calls that set them, in runc's order: the bounding set
//! before the user changes (with PR_SET_KEEPCAPS so that the permitted set survives
//! setuid), then effective, permitted and inheritable (capset), then the ambient set.

/// A set of capabilities as a bit mask. Names this table or the kernel does not know are
/// left out, as runc leaves them out (with a warning there).
pub fn mask(names: &[String], last_cap: u32) -> u64 {
    names
        .iter()
        .filter_map(|n| peapod_host::capability::number(n))
        .filter(|&i| i <= last_cap)
        .fold(0, |m, i| m | (1u64 << i))
}

/// The highest capability this kernel knows.
pub fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// The sets to apply, as masks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sets {
    pub bounding: u64,
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
    pub ambient: u64,
}

fn os(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Drops from the bounding set every capability not in `bounding`.
pub fn apply_bounding(bounding: u64, last_cap: u32) -> Result<(), String> {
    for cap in 0..=last_cap {
        if bounding & (1 << cap) == 0 {
            // SAFETY: prctl with integer arguments.
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } < 0 {
                return Err(os("drop from the bounding set"));
            }
        }
    }
    Ok(())
}

pub fn keep_caps(on: bool) -> Result<(), String> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, on as libc::c_ulong, 0, 0, 0) } < 0 {
        return Err(os("PR_SET_KEEPCAPS"));
    }
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Sets effective, permitted and inheritable, then the ambient set (cleared, then raised).
pub fn apply(sets: &Sets, last_cap: u32) -> Result<(), String> {
    let header = CapHeader {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let split = |m: u64| [m as u32, (m >> 32) as u32];
    let (e, p, i) = (
        split(sets.effective),
        split(sets.permitted),
        split(sets.inheritable),
    );
    let data = [
        CapData {
            effective: e[0],
            permitted: p[0],
            inheritable: i[0],
        },
        CapData {
            effective: e[1],
            permitted: p[1],
            inheritable: i[1],
        },
    ];
    // SAFETY: capset with a v3 header and the two data words it reads.
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) } < 0 {
        return Err(os("capset"));
    }
    // SAFETY: prctl with integer arguments.
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    } < 0
    {
        return Err(os("clear the ambient set"));
    }
    for cap in 0..=last_cap {
        if sets.ambient & (1 << cap) != 0 {
            // SAFETY: as above.
            let rc = unsafe {
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                    cap as libc::c_ulong,
                    0,
                    0,
                )
            };
            // runc (gocapability) ignores a raise the kernel refuses (not in permitted and
            // inheritable): so does this.
            let _ = rc;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_make_masks_up_to_the_kernels_last() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(mask(&s(&["CAP_CHOWN", "CAP_KILL"]), 40), 0b100001);
        assert_eq!(mask(&s(&["CAP_CHECKPOINT_RESTORE"]), 40), 1 << 40);
        assert_eq!(mask(&s(&["CAP_CHECKPOINT_RESTORE"]), 39), 0);
        assert_eq!(mask(&s(&["CAP_NOPE", "CAP_NET_RAW"]), 40), 1 << 13);
    }
}
