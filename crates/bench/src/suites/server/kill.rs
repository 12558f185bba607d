//! Survival of `kill -9`: keys set one by one and acknowledged, the
//! server killed and restarted on the same pool, the survivors counted.

use super::*;

/// A minimal memcached text-protocol client for the kill test.
struct Client {
    rd: BufReader<TcpStream>,
    wr: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> std::io::Result<Client> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Client {
            rd: BufReader::new(s.try_clone()?),
            wr: s,
        })
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut l = String::new();
        if self.rd.read_line(&mut l)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(l.trim_end().to_string())
    }

    /// `set`; true when the server answered `STORED`.
    fn set(&mut self, key: &str, value: &[u8]) -> std::io::Result<bool> {
        let mut m = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        m.extend_from_slice(value);
        m.extend_from_slice(b"\r\n");
        self.wr.write_all(&m)?;
        Ok(self.line()? == "STORED")
    }

    /// How many of `keys` a multi-key `get` finds.
    fn count(&mut self, keys: &[String]) -> std::io::Result<usize> {
        self.wr
            .write_all(format!("get {}\r\n", keys.join(" ")).as_bytes())?;
        let mut n = 0;
        loop {
            let l = self.line()?;
            if l == "END" {
                return Ok(n);
            }
            let Some(len) = l
                .strip_prefix("VALUE ")
                .and_then(|v| v.split_whitespace().nth(2))
                .and_then(|b| b.parse::<usize>().ok())
            else {
                return Err(std::io::Error::other(format!("unexpected reply '{l}'")));
            };
            let mut data = vec![0; len + 2];
            self.rd.read_exact(&mut data)?;
            n += 1;
        }
    }
}

/// The kill -9 test of `sys` (module documentation).
pub(super) fn survival(ctx: &BenchCtx, plan: &Plan, sys: &System) -> Result<Row, BenchError> {
    let fail = |what: &str, e: std::io::Error| {
        BenchError::Unsupported(format!("kill test of {}: {what}: {e}", sys.variant()))
    };
    let keys: Vec<String> = (0..plan.kill_keys)
        .map(|i| format!("kill9:{i:08}"))
        .collect();
    let value = [b'v'; 64];
    let mut server = sys.start()?;
    let mut acked = 0usize;
    let loading = Instant::now();
    {
        let mut c = Client::connect(server.addr).map_err(|e| fail("connect", e))?;
        for k in &keys {
            if c.set(k, &value).map_err(|e| fail("set", e))? {
                acked += 1;
            }
        }
    }
    let load_secs = loading.elapsed().as_secs_f64();
    // SIGKILL, then the same command line on the same file.
    server.child.kill().map_err(|e| fail("kill", e))?;
    let _ = server.child.wait();
    drop(server);
    let t0 = Instant::now();
    let server = sys.start()?;
    let restart_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut c = Client::connect(server.addr).map_err(|e| fail("connect", e))?;
    let mut survived = 0;
    for chunk in keys.chunks(100) {
        survived += c.count(chunk).map_err(|e| fail("get", e))?;
    }
    drop(server);
    ctx.note(format!(
        "[server] kill -9: {} kept {survived} of {acked} acknowledged keys",
        sys.variant()
    ));
    let mut r = Row::empty(
        SUITE,
        &sys.variant(),
        json!({
            "mix": KILL_MIX,
            "key_bytes": 14,
            "value_bytes": value.len(),
            "client_threads": 1,
        }),
    );
    r.counters_observed = false;
    // The timed part is the loading: one set at a time, each acknowledged
    // before the next is sent (the latency of a durable set, for Ferrite).
    r.ops = keys.len() as u64;
    r.secs = load_secs;
    if load_secs > 0.0 {
        r.ops_per_s = keys.len() as f64 / load_secs;
        r.ns_per_op = load_secs * 1e9 / keys.len() as f64;
    }
    r.reps = 1;
    r.set_extra("acknowledged", acked);
    r.set_extra("survived", survived);
    r.set_extra("restart_ms", (restart_ms * 10.0).round() / 10.0);
    Ok(r)
}
