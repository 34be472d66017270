//! Machine-wide slots, so that tests running in parallel (threads of one test binary, or
//! several binaries under nextest) never share a bridge name, subnet or cgroup parent.
//!
//! A slot is a file created with O_EXCL under /tmp/peapod-e2e-slots holding the owner's pid;
//! a slot whose owner is gone is taken over.

use std::io::Write;
use std::path::PathBuf;

const DIR: &str = "/tmp/peapod-e2e-slots";
pub const SLOTS: u32 = 200;

pub struct Slot {
    pub n: u32,
    path: PathBuf,
}

fn owner_alive(path: &PathBuf) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return true;
    };
    let Ok(pid) = text.trim().parse::<i32>() else {
        // Being written right now.
        return true;
    };
    // A zombie's cmdline is empty; a live process has one.
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty())
}

impl Slot {
    pub fn acquire() -> Slot {
        std::fs::create_dir_all(DIR).expect("create slot dir");
        for round in 0..2 {
            for n in 1..SLOTS {
                let path = PathBuf::from(DIR).join(n.to_string());
                match std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                {
                    Ok(mut f) => {
                        let _ = write!(f, "{}", std::process::id());
                        return Slot { n, path };
                    }
                    Err(_) if round == 1 && !owner_alive(&path) => {
                        let _ = std::fs::remove_file(&path);
                    }
                    Err(_) => {}
                }
            }
        }
        panic!("no free test slot in {DIR}");
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
