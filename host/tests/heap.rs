//! `peapod_host::heap::use_one_arena`: threads that allocate after it share the main arena,
//! where without it each gets one of its own. Run as a plain program (`harness = false`): the
//! limit only holds when set before a second thread allocates.

use std::process::Command;

/// What the control run (the same threads, without the call) is told by.
const CONTROL: &str = "PEAPOD_HEAP_TEST_CONTROL";

fn main() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os(CONTROL).is_some() {
            allocate_on_threads();
            println!("{}", arenas());
            return;
        }
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            // The operator's setting wins over ours by design, and would decide both runs.
            eprintln!("heap: MALLOC_ARENA_MAX is set; run this test without it");
            std::process::exit(1);
        }
        peapod_host::heap::use_one_arena();
        allocate_on_threads();
        let with = arenas();
        let control = Command::new(std::env::current_exe().expect("own path"))
            .env(CONTROL, "1")
            .output()
            .expect("run the control");
        assert!(control.status.success(), "control run failed: {control:?}");
        let without: usize = String::from_utf8_lossy(&control.stdout)
            .trim()
            .parse()
            .expect("the control's arena count");
        assert_eq!(
            with, 1,
            "threads got arenas of their own after use_one_arena"
        );
        assert!(
            without > 1,
            "without use_one_arena the threads shared {without} arena(s): the test proves nothing"
        );
        println!("heap: 1 arena with use_one_arena, {without} without: ok");
    }
}

/// Eight threads, each allocating and keeping a few thousand blocks at once.
fn allocate_on_threads() {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let blocks: Vec<Vec<u8>> = (0..2000).map(|i| vec![1u8; 64 + i % 512]).collect();
                blocks.len()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().expect("an allocating thread"), 2000);
    }
}

/// How many arenas glibc's `malloc_info` report lists (one `<heap nr=...>` each).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn arenas() -> usize {
    extern "C" {
        fn open_memstream(buf: *mut *mut libc::c_char, len: *mut libc::size_t) -> *mut libc::FILE;
        fn malloc_info(options: libc::c_int, stream: *mut libc::FILE) -> libc::c_int;
    }
    let mut buf: *mut libc::c_char = std::ptr::null_mut();
    let mut len: libc::size_t = 0;
    // SAFETY: open_memstream sets buf and len at fclose; buf is glibc's malloc'd copy of the
    // report, copied out and then freed here.
    let report = unsafe {
        let stream = open_memstream(&mut buf, &mut len);
        assert!(!stream.is_null(), "open_memstream");
        assert_eq!(malloc_info(0, stream), 0, "malloc_info");
        libc::fclose(stream);
        let bytes = std::slice::from_raw_parts(buf as *const u8, len).to_vec();
        libc::free(buf.cast());
        bytes
    };
    String::from_utf8_lossy(&report)
        .matches("<heap nr=")
        .count()
}
