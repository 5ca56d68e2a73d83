//! Private network and mount namespaces for a test process: inside them the harness may add
//! firewall rules and mount file systems without touching the machine's.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use super::HarnessError;

/// Set by [`enter_private_namespaces`] in the environment of the program it runs again: the
/// network namespace it left (`net:[inode]`).
const MARKER: &str = "ZKR_PRIVATE_NAMESPACES";

/// This process's network namespace, as `/proc` names it.
fn network_namespace() -> Option<std::ffi::OsString> {
    std::fs::read_link("/proc/self/ns/net")
        .ok()
        .map(|p| p.into_os_string())
}

/// True if this process runs in namespaces [`enter_private_namespaces`] made: its network
/// namespace is another than the one the program started in.
pub fn in_private_namespaces() -> bool {
    match (std::env::var_os(MARKER), network_namespace()) {
        (Some(left), Some(own)) => left != own,
        _ => false,
    }
}

/// Makes this program run in network and mount namespaces of its own: it runs itself again,
/// with the same arguments, under `unshare --net --mount` (loopback brought up, mounts private),
/// replacing this process (`exec`: same pid, nothing left behind). Returns `Ok` at once if the
/// process is already inside such namespaces; an error if they cannot be made here (not root,
/// no `unshare` or `ip`), and then the caller goes on without them.
///
/// Call it first thing in `main`, before anything else runs: the process is replaced.
/// Everything the program then starts (servers, clients, firewall rules, mounts) lives in the
/// namespaces and goes with the last process in them; loopback there is the program's own.
pub fn enter_private_namespaces() -> Result<(), HarnessError> {
    if in_private_namespaces() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(HarnessError::StartFailed(
            "private network namespaces need root (unshare --net)".into(),
        ));
    }
    // Tried first in a child, so that a refusal leaves this process running.
    let probe = Command::new(system_tool("unshare"))
        .args(["--net", "--mount", "--"])
        .arg(system_tool("ip"))
        .args(["link", "set", "lo", "up"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            return Err(HarnessError::StartFailed(format!(
                "unshare --net --mount failed here: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
        Err(e) => {
            return Err(HarnessError::StartFailed(format!(
                "cannot run unshare (util-linux): {e}"
            )))
        }
    }
    let left = network_namespace()
        .ok_or_else(|| HarnessError::StartFailed("cannot read /proc/self/ns/net".into()))?;
    let exe = std::env::current_exe()?;
    let err = Command::new(system_tool("unshare"))
        .args(["--net", "--mount", "--", "sh", "-c"])
        .arg(r#""$ZKR_IP" link set lo up && exec "$0" "$@""#)
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(MARKER, left)
        .env("ZKR_IP", system_tool("ip"))
        .exec();
    Err(err.into())
}

/// A system program by name: from `/usr/sbin` or `/sbin` if it is there (where Debian puts
/// `nft`, `mkfs.ext4`, `fsfreeze`; a PATH may lack them), else as the PATH finds it.
pub(crate) fn system_tool(name: &str) -> std::path::PathBuf {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|dir| std::path::Path::new(dir).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| name.into())
}

/// `Ok` if a finished command succeeded, else what it said on its error output, as `what`
/// failing.
pub(crate) fn succeeded(out: &std::process::Output, what: &str) -> Result<(), HarnessError> {
    if out.status.success() {
        Ok(())
    } else {
        Err(HarnessError::StartFailed(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
