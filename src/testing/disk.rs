//! A member's transaction log on a disk of its own that the harness can stall: a small ext4
//! file system on a loop device, frozen with `fsfreeze` (every write and `fsync` on it blocks
//! until it thaws), in a mount namespace the test made.

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use parking_lot::Mutex;

use super::namespace::{succeeded, system_tool};
use super::HarnessError;

/// The file system's size: ZooKeeper preallocates its logs (see
/// [`PREALLOC_KB`]), snapshots stay on the data directory.
const IMAGE_BYTES: u64 = 96 << 20;
/// What members with such a disk preallocate per log file (`zookeeper.preAllocSize`, KiB),
/// instead of 64 MiB.
pub(crate) const PREALLOC_KB: u32 = 1024;

pub(crate) struct FreezableDisk {
    mount: PathBuf,
    /// The process holding the file system frozen: it thaws it when its standard input
    /// closes, so a frozen disk never outlives us (a process stuck on it could not be killed).
    frozen: Mutex<Option<Child>>,
}

impl FreezableDisk {
    /// Makes the file system in `image` (a sparse file) and mounts it on `mount`.
    pub fn new(image: &Path, mount: &Path) -> Result<FreezableDisk, HarnessError> {
        std::fs::File::create(image)?.set_len(IMAGE_BYTES)?;
        std::fs::create_dir_all(mount)?;
        run(Command::new(system_tool("mkfs.ext4"))
            .args(["-q", "-F"])
            .arg(image))?;
        run(Command::new(system_tool("mount"))
            .args(["-o", "loop"])
            .arg(image)
            .arg(mount))?;
        Ok(FreezableDisk {
            mount: mount.to_owned(),
            frozen: Mutex::new(None),
        })
    }

    /// Where the file system is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Freezes the file system: from now on every write to it, and every `fsync`, blocks
    /// until [`thaw`](Self::thaw). True if it was not frozen already.
    pub fn freeze(&self) -> Result<bool, HarnessError> {
        let mut frozen = self.frozen.lock();
        if frozen.is_some() {
            return Ok(false);
        }
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#""$1" -f "$0" || exit 1; echo frozen; read _; "$1" -u "$0""#)
            .arg(&self.mount)
            .arg(system_tool("fsfreeze"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            BufReader::new(out).read_line(&mut line)?;
        }
        if line.trim() != "frozen" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(HarnessError::StartFailed(format!(
                "fsfreeze -f {} failed",
                self.mount.display()
            )));
        }
        *frozen = Some(child);
        Ok(true)
    }

    /// Thaws a [`freeze`](Self::freeze)d file system; what blocked on it goes on.
    pub fn thaw(&self) {
        if let Some(mut child) = self.frozen.lock().take() {
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(b"thaw\n");
            }
            let _ = child.wait();
        }
    }
}

impl Drop for FreezableDisk {
    fn drop(&mut self) {
        self.thaw();
        let _ = Command::new(system_tool("umount"))
            .arg("-l")
            .arg(&self.mount)
            .stderr(Stdio::null())
            .status();
    }
}

fn run(cmd: &mut Command) -> Result<(), HarnessError> {
    let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output()?;
    succeeded(&out, &format!("{cmd:?} failed"))
}
