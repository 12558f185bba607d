//! The machine a report ran on: CPU model, cores, memory, kernel, the
//! probe's persist-barrier cost, the date and the git commit.

use ferrite_rows::Row;

/// What the page says about the machine. Fields that could not be read
/// are `None` and print as "unknown".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Machine {
    pub cpu: Option<String>,
    pub cores: Option<usize>,
    pub memory_bytes: Option<u64>,
    pub kernel: Option<String>,
    /// `YYYY-MM-DD HH:MM UTC`.
    pub date: String,
    pub commit: Option<String>,
    /// `(probe variant, ns)` of one line stored, flushed and fenced, per
    /// flush instruction, from the `probe` rows.
    pub barriers: Vec<(String, f64)>,
}

impl Machine {
    /// Reads this machine (Linux `/proc`), the time now, the commit of
    /// the git work tree around the current directory, and the barrier
    /// cost from `rows` (empty when they hold no `probe` rows).
    pub fn current(rows: &[Row]) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Machine {
            cpu: cpu_model(&cpuinfo),
            cores: std::thread::available_parallelism().ok().map(|n| n.get()),
            memory_bytes: mem_total(&meminfo),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_string()),
            date: crate::date::utc(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            ),
            commit: git_commit(),
            barriers: barriers(rows),
        }
    }
}

/// The first `model name` of `/proc/cpuinfo`.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `git rev-parse --short=12 HEAD` (with `-dirty` when the tree has
/// changes), `None` outside a work tree or without git.
pub fn git_commit() -> Option<String> {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = run(&["rev-parse", "--short=12", "HEAD"])?;
    let dirty =
        run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// The probe's cost of one line stored, flushed and fenced (params
/// `lines` = 1, a buffer larger than one line), per flush instruction.
pub fn barriers(rows: &[Row]) -> Vec<(String, f64)> {
    rows.iter()
        .filter(|r| {
            r.suite == "probe"
                && r.params.get("lines").and_then(|v| v.as_u64()) == Some(1)
                && r.params.get("flush").is_some()
                && r.params.get("buffer").and_then(|v| v.as_str()) != Some("1 line")
                && r.ns_per_op > 0.0
        })
        .map(|r| (r.variant.clone(), r.ns_per_op))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        assert_eq!(
            cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags: x\n").as_deref(),
            Some("AMD EPYC 9B14")
        );
        assert_eq!(cpu_model("nothing"), None);
        assert_eq!(
            mem_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24_576_000 * 1024)
        );
        assert_eq!(mem_total("MemTotal: lots"), None);
    }
}
