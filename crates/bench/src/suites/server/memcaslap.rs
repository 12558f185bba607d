//! memcaslap's output, parsed: throughput, mean and 99th-percentile
//! latency, get misses.

use super::*;

/// What one memcaslap run reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlapResult {
    pub ops: u64,
    pub secs: f64,
    pub tps: f64,
    pub avg_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub get_misses: Option<u64>,
}

/// Parses memcaslap's output: the final `Run time: 2.0s Ops: N TPS: N …`
/// line, `get_misses: N`, and from the `Total Statistics (N events)` block
/// (printed with `-S`) `Avg:` and the `Log2 Dist:` rows (`i: a b c d` are
/// the counts of latencies in `[2^i, 2^(i+1))`, `[2^(i+1), …)`, … µs).
/// `None` when the final line is missing.
pub fn parse_memcaslap(out: &str) -> Option<SlapResult> {
    let mut r = SlapResult::default();
    let last = out.lines().rev().find(|l| l.contains("TPS:"))?;
    let mut w = last.split_whitespace();
    let mut found = (false, false);
    while let Some(t) = w.next() {
        match t {
            "time:" => r.secs = w.next()?.trim_end_matches('s').parse().ok()?,
            "Ops:" => {
                r.ops = w.next()?.parse().ok()?;
                found.0 = true;
            }
            "TPS:" => {
                r.tps = w.next()?.parse().ok()?;
                found.1 = true;
            }
            _ => {}
        }
    }
    if !(found.0 && found.1) {
        return None;
    }
    for l in out.lines() {
        if let Some(v) = l.trim().strip_prefix("get_misses:") {
            r.get_misses = v.trim().parse().ok();
        }
    }
    // The Total Statistics block with its event count.
    let mut lines = out
        .lines()
        .skip_while(|l| !l.starts_with("Total Statistics ("));
    let head = lines.next();
    let events: Option<u64> =
        head.and_then(|h| h.split('(').nth(1)?.split_whitespace().next()?.parse().ok());
    let mut buckets: Vec<(u32, u64)> = Vec::new();
    let mut in_dist = false;
    for l in lines {
        let t = l.trim();
        if t.is_empty() {
            break;
        }
        if let Some(v) = t.strip_prefix("Avg:") {
            r.avg_us = v.trim().parse().ok();
        } else if t.starts_with("Log2 Dist:") {
            in_dist = true;
        } else if in_dist {
            let Some((first, counts)) = t.split_once(':') else {
                break;
            };
            let Ok(first) = first.trim().parse::<u32>() else {
                break;
            };
            for (i, c) in counts.split_whitespace().enumerate() {
                if let Ok(c) = c.parse::<u64>() {
                    buckets.push((first + i as u32, c));
                }
            }
        }
    }
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    let total = events.filter(|&e| e >= total).unwrap_or(total);
    if total > 0 {
        let want = (total as f64 * 0.99).ceil() as u64;
        let mut seen = 0;
        for (i, c) in &buckets {
            seen += c;
            if seen >= want {
                r.p99_us = Some(2f64.powi(*i as i32 + 1));
                break;
            }
        }
    }
    Some(r)
}

/// Runs memcaslap against `addr` with `cfg` (a config file) once.
pub(crate) fn slap(plan: &Plan, addr: SocketAddr, cfg: &Path) -> Result<SlapResult, BenchError> {
    let mut child = Command::new("memcaslap")
        .arg("-s")
        .arg(addr.to_string())
        .args(["-T", &plan.client_threads.to_string()])
        .args(["-c", &plan.concurrency.to_string()])
        .args(["-t", &format!("{}s", plan.secs)])
        .args(["-S", &format!("{}s", plan.secs)])
        .arg("-F")
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::Unsupported(format!("memcaslap: {e}")))?;
    // Read stdout on a thread so a full pipe never stalls memcaslap; kill it
    // if it overruns its run time by far (a hung server).
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = stdout.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let mut stderr = child.stderr.take();
    let ereader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = stderr.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let deadline = Instant::now() + Duration::from_secs(u64::from(plan.secs) + 30);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let out = reader.join().unwrap_or_default();
    let err = ereader.join().unwrap_or_default();
    match (status, parse_memcaslap(&out)) {
        (Some(_), Some(r)) if r.ops > 0 => Ok(r),
        (status, _) => Err(BenchError::Unsupported(format!(
            "memcaslap against {addr}: {} ; {}",
            status.map_or("killed after its deadline".into(), |s| s.to_string()),
            err.trim().lines().last().unwrap_or("no result line")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Total Statistics (1000 events)\n   Min:        12\n   Avg:       152\n   Log2 Dist:\n       4:     100    800    80    10\n       8:    9     1     0     0\n\ncmd_get: 950\nget_misses: 3\n\nRun time: 2.0s Ops: 209200 TPS: 104590 Net_rate: 12.1M/s\n";

    #[test]
    fn memcaslap_output_parses() {
        let r = parse_memcaslap(SAMPLE).expect("parses");
        assert_eq!(r.ops, 209_200);
        assert_eq!(r.tps, 104_590.0);
        assert_eq!(r.secs, 2.0);
        assert_eq!(r.avg_us, Some(152.0));
        assert_eq!(r.get_misses, Some(3));
        // 99% of 1000 events = 990 = 100+800+80+10, reached in bucket 7:
        // the p99 lies in [128, 256).
        assert_eq!(r.p99_us, Some(256.0));
        assert!(parse_memcaslap("no result").is_none());
    }
}
