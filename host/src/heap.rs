//! The allocator's arenas: one for the whole process.
//!
//! glibc's malloc gives every thread that allocates an arena of its own, up to eight per core,
//! and memory freed into one arena is never reused by another or returned while anything above
//! it in that arena is live. The daemon's threads (two async workers, the blocking pool's
//! threads that come and go, the blocking runtime of `peapod_daemon::blocking`) each came to hold an
//! arena. With one arena its anonymous memory went from 15.0 to 9.0 MB with 20 pods and from
//! 28.0 to 20.0 MB with 300 (peapod-bench `--scale`, both builds side by side), the pod
//! lifecycle, pulls and exec unchanged within noise (docs/performance.md). Our threads rarely
//! allocate at the same instant (two cores, work that waits on system calls), and each keeps
//! glibc's per-thread cache of small blocks, so the one lock costs little.

/// Has the process use one malloc arena, unless `MALLOC_ARENA_MAX` says otherwise (glibc has
/// read it already; an operator's explicit choice stands). Call it first thing in `main`,
/// before any thread exists: glibc fixes its arena limit when a second thread first
/// allocates, and a limit set after that is ignored. `tests/heap.rs` checks it.
pub fn use_one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt changes a malloc parameter under malloc's own lock; no memory is
        // handed over.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

/// Gives back to the kernel what a burst of work left resident and no longer uses: the
/// allocator's free pages ([`release_free_heap`]) and the calling thread's stack below its
/// current frame ([`release_stack_below_caller`]). For a long-lived process that is idle
/// most of its life (a shim): call it once the burst is over, from a shallow frame. Returns
/// the stack bytes given back.
pub fn release_after_burst() -> usize {
    release_free_heap();
    release_stack_below_caller()
}

/// Returns the allocator's free pages to the kernel, wherever they lie in the heap: glibc
/// only gives back the heap's top, and only past 128 kB, so the pages a burst's freed blocks
/// held stay resident until reused.
fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim works under malloc's own lock and frees only free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What is kept below the caller's frame: this function's own frame and those of the calls
/// it makes after taking the frame's address (the `madvise` wrapper), a few hundred bytes,
/// with room to spare.
const STACK_MARGIN: usize = 4 << 10;

/// Gives back the pages of the calling thread's stack below the caller's frame, less a
/// margin: deeper calls earlier touched them, and they stay resident for the thread's life
/// though nothing lives there now (whatever lives on a stack lies above its pointer). A page
/// touched again later comes back zeroed, as the stack's untouched pages do, so this changes
/// no behaviour: only the memory held between bursts (glibc does the same to a thread's stack
/// when the thread exits). Returns the bytes given back (0 where the bounds are unknown).
#[inline(never)]
fn release_stack_below_caller() -> usize {
    let frame = 0u8;
    let here = std::hint::black_box(&frame) as *const u8 as usize;
    let Some(lowest) = stack_lowest_address() else {
        return 0;
    };
    let page = page_size();
    let end = here.saturating_sub(STACK_MARGIN) & !(page - 1);
    let start = (lowest + page - 1) & !(page - 1);
    if end <= start {
        return 0;
    }
    // SAFETY: [start, end) is this thread's stack below the live frames (all at or above
    // `here` but for the margin's callees); MADV_DONTNEED drops those pages, which read as
    // zeros if touched again. Parts of the range not mapped (a main thread's stack grows on
    // demand) make madvise answer ENOMEM after doing the rest, which is what is wanted.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
    }
    end - start
}

/// The lowest address of the calling thread's stack (glibc's view: for the main thread, as
/// far down as it may grow without meeting another mapping).
fn stack_lowest_address() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        // SAFETY: pthread_getattr_np initialises `attr` on success, which is destroyed once
        // read; pthread_attr_getstack only writes the two out-parameters.
        unsafe {
            if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
                return None;
            }
            let rc = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size);
            libc::pthread_attr_destroy(attr.as_mut_ptr());
            if rc != 0 || size == 0 {
                return None;
            }
        }
        Some(addr as usize)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident kB of the mapping of /proc/self/smaps that holds `address`.
    fn resident_kb_of_mapping_at(address: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = (lo..hi).contains(&address);
                    continue;
                }
            }
            if inside {
                if let Some(kb) = line.strip_prefix("Rss:") {
                    return kb
                        .trim()
                        .trim_end_matches(" kB")
                        .trim()
                        .parse()
                        .expect("Rss");
                }
            }
        }
        panic!("no mapping holds {address:#x}");
    }

    /// Touches `depth` kB of stack below the caller, one page at a time.
    #[inline(never)]
    fn go_deep(depth: usize) -> u8 {
        let mut page = [0u8; 1024];
        std::hint::black_box(&mut page);
        if depth <= 1 {
            page[7]
        } else {
            go_deep(depth - 1).wrapping_add(std::hint::black_box(page[3]))
        }
    }

    #[test]
    fn a_deep_burst_leaves_the_stack_resident_until_released_and_it_still_works() {
        // Its own thread, so that the stack is known and touched by nothing else.
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(|| {
                let frame = 0u8;
                let here = std::hint::black_box(&frame) as *const u8 as usize;
                assert_eq!(go_deep(512), 0);
                let deep = resident_kb_of_mapping_at(here);
                assert!(deep >= 512, "the burst left {deep} kB resident");
                let released = release_stack_below_caller();
                let after = resident_kb_of_mapping_at(here);
                assert!(released >= 480 << 10, "released {released} bytes");
                assert!(after + 480 <= deep, "{deep} kB before, {after} kB after");
                // The pages come back (as zeros) when used again.
                assert_eq!(go_deep(512), 0);
                assert!(resident_kb_of_mapping_at(here) >= 512);
            })
            .expect("spawn")
            .join()
            .expect("the thread");
    }

    #[test]
    fn blocks_live_across_a_release_keep_their_contents_and_the_heap_still_serves() {
        let freed: Vec<Vec<u8>> = (0..256).map(|_| vec![7u8; 8192]).collect();
        let kept: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 3000]).collect();
        drop(freed);
        release_after_burst();
        assert!(kept
            .iter()
            .enumerate()
            .all(|(i, b)| b.iter().all(|&x| x == i as u8)));
        let again: Vec<Vec<u8>> = (0..256).map(|_| vec![9u8; 8192]).collect();
        assert!(again.iter().all(|b| b.iter().all(|&x| x == 9)));
    }
}
