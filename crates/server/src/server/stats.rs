//! The administration commands and `stats` with its subcommands.

use super::{Ctx, Flow, VERSION};
use crate::observe::{LOG_FETCHERS, LOG_MUTATIONS};
use crate::protocol::{self, Failure, Proto, Request, Response};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The text administration commands, as memcached answers them.
pub(super) fn admin(args: &[Vec<u8>], out: &mut Vec<u8>) -> Flow {
    let arg = |i: usize| args.get(i).map_or(&[][..], Vec::as_slice);
    let line: &[u8] = match arg(0) {
        b"watch" => {
            let mut mask = 0u8;
            for a in &args[1..] {
                match a.as_slice() {
                    b"fetchers" => mask |= LOG_FETCHERS,
                    b"mutations" => mask |= LOG_MUTATIONS,
                    // Categories this server logs nothing for: watching
                    // them is allowed and quiet.
                    b"rawcmds" | b"evictions" | b"sysevents" | b"connevents" => {}
                    _ => {
                        out.extend_from_slice(b"ERROR\r\n");
                        return Flow::Continue;
                    }
                }
            }
            if args.len() == 1 {
                mask = LOG_FETCHERS;
            }
            return Flow::Watch(mask);
        }
        b"slabs" if args.len() >= 3 && arg(1) == b"automove" => {
            // ferrite has no slab classes to move pages between: the
            // setting is validated as memcached validates it and has no
            // effect.
            if arg(2) == b"ratio" {
                let ok = args.len() >= 4
                    && std::str::from_utf8(arg(3))
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok())
                        .is_some();
                if ok { b"OK" } else { b"ERROR" }
            } else {
                match protocol::parse_u32(arg(2)) {
                    None => b"CLIENT_ERROR bad command line format",
                    Some(0..=2) => b"OK",
                    Some(_) => b"ERROR",
                }
            }
        }
        b"slabs" if args.len() == 4 && arg(1) == b"reassign" => {
            b"CLIENT_ERROR slab reassignment disabled"
        }
        b"lru_crawler" if args.len() >= 2 => b"CLIENT_ERROR lru crawler disabled",
        b"shutdown" => b"ERROR: shutdown not enabled",
        _ => b"ERROR",
    };
    out.extend_from_slice(line);
    out.extend_from_slice(b"\r\n");
    Flow::Continue
}

/// `stats [group]`, text and binary (whose group is the key, subcommand
/// and all).
pub(super) async fn stats(ctx: &Ctx<'_>, req: &Request, args: &[Vec<u8>], out: &mut Vec<u8>) {
    let words: Vec<&[u8]> = if req.ctx.proto == Proto::Binary {
        args.first()
            .map(|a| a.split(|&b| b == b' ').filter(|t| !t.is_empty()).collect())
            .unwrap_or_default()
    } else {
        args.iter().map(Vec::as_slice).collect()
    };
    let binary = req.ctx.proto == Proto::Binary;
    let list;
    let resp = match words.as_slice() {
        [] => {
            // The item counts are complete once the start-up scan has
            // seeded every shard.
            while !ctx.shared.counted() {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            list = general_stats(ctx);
            Response::Stats(&list)
        }
        [b"settings"] => {
            list = settings_stats(ctx);
            Response::Stats(&list)
        }
        [b"reset"] => {
            ctx.shared.stats.reset();
            ctx.shared.detail.reset();
            if let Some(a) = &ctx.opts.auth {
                a.cmds.store(0, Relaxed);
                a.errors.store(0, Relaxed);
            }
            ctx.rejected_conns.store(0, Relaxed);
            if binary {
                Response::Stats(&[])
            } else {
                Response::Line("RESET")
            }
        }
        [b"detail", sub, ..] if matches!(*sub, b"on" | b"off") => {
            ctx.shared.detail.set_on(*sub == b"on");
            if binary {
                Response::Stats(&[])
            } else {
                Response::Ok
            }
        }
        [b"detail", b"dump", ..] => {
            let dump = ctx.shared.detail.dump();
            if binary {
                let v = String::from_utf8_lossy(&dump).into_owned();
                list = vec![("detailed".to_string(), v)];
                Response::Stats(&list)
            } else {
                out.extend_from_slice(&dump);
                return;
            }
        }
        [b"detail", ..] if !binary => {
            Response::Error(Failure::client("usage: stats detail on|off|dump"))
        }
        [b"conns"] => {
            list = conns_stats(ctx);
            Response::Stats(&list)
        }
        [b"slabs"] => {
            list = ctx.shared.slabs.slabs();
            Response::Stats(&list)
        }
        [b"items"] => {
            list = ctx.shared.slabs.items();
            Response::Stats(&list)
        }
        [b"sizes"] => Response::Stats(&[]),
        _ if binary => Response::NotFound,
        _ => Response::Error(Failure::UnknownCommand),
    };
    protocol::encode(&resp, &req.ctx, out);
}

fn conns_stats(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    let now = Instant::now();
    let conns = ctx.conns.lock();
    let mut v = Vec::with_capacity(conns.len() * 4);
    for (id, c) in conns.iter() {
        v.push((format!("{id}:addr"), format!("tcp:{}", c.peer)));
        v.push((format!("{id}:listen_addr"), format!("tcp:{}", c.local)));
        v.push((format!("{id}:state"), "conn_parse_cmd".into()));
        v.push((
            format!("{id}:secs_since_last_cmd"),
            now.duration_since(c.last_cmd).as_secs().to_string(),
        ));
    }
    v
}

fn general_stats(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    let s = &ctx.shared.stats;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut v: Vec<(String, String)> = Vec::with_capacity(40);
    let mut put = |k: &str, val: String| v.push((k.to_string(), val));
    put("pid", std::process::id().to_string());
    put("uptime", ctx.started.elapsed().as_secs().to_string());
    put("time", now.as_secs().to_string());
    put("version", VERSION.to_string());
    put("libevent", "tokio".to_string());
    put(
        "pointer_size",
        (8 * std::mem::size_of::<usize>()).to_string(),
    );
    put("max_connections", ctx.opts.max_conns.to_string());
    put(
        "rejected_connections",
        ctx.rejected_conns.load(Relaxed).to_string(),
    );
    put("curr_connections", ctx.curr_conns.load(Relaxed).to_string());
    put(
        "total_connections",
        ctx.total_conns.load(Relaxed).to_string(),
    );
    let g = |c: &AtomicU64| c.load(Relaxed).to_string();
    put("cmd_get", g(&s.cmd_get));
    put("cmd_set", g(&s.cmd_set));
    put("cmd_flush", g(&s.cmd_flush));
    put("cmd_touch", g(&s.cmd_touch));
    put("get_hits", g(&s.get_hits));
    put("get_misses", g(&s.get_misses));
    put("get_expired", g(&s.get_expired));
    put("get_flushed", g(&s.get_flushed));
    put("delete_misses", g(&s.delete_misses));
    put("delete_hits", g(&s.delete_hits));
    put("incr_misses", g(&s.incr_misses));
    put("incr_hits", g(&s.incr_hits));
    put("decr_misses", g(&s.decr_misses));
    put("decr_hits", g(&s.decr_hits));
    put("cas_misses", g(&s.cas_misses));
    put("cas_hits", g(&s.cas_hits));
    put("cas_badval", g(&s.cas_badval));
    put("touch_hits", g(&s.touch_hits));
    put("touch_misses", g(&s.touch_misses));
    put("threads", ctx.opts.threads.to_string());
    put("ferrite_shards", ctx.shards.len().to_string());
    put("ferrite_group_commits", g(&s.group_commits));
    put("ferrite_grouped_requests", g(&s.grouped_requests));
    put("ferrite_fast_gets", g(&s.fast_gets));
    put("ferrite_store", ctx.opts.store_name.clone());
    put("limit_maxbytes", ctx.opts.memory.to_string());
    put("bytes", s.bytes.load(Relaxed).max(0).to_string());
    put("curr_items", ctx.shared.items().to_string());
    put("total_items", g(&s.total_items));
    put("evictions", g(&s.evictions));
    if let Some(a) = &ctx.opts.auth {
        put("auth_cmds", a.cmds.load(Relaxed).to_string());
        put("auth_errors", a.errors.load(Relaxed).to_string());
    }
    if ctx.shared.scan_failed.load(Relaxed) {
        put("ferrite_scan_failed", "1".to_string());
    }
    v
}

fn settings_stats(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    vec![
        ("maxbytes".into(), ctx.opts.memory.to_string()),
        ("num_threads".into(), ctx.opts.threads.to_string()),
        (
            "item_size_max".into(),
            ctx.opts.limits.max_item_size.to_string(),
        ),
        ("cas_enabled".into(), "yes".into()),
        ("evictions".into(), "on".into()),
        ("maxconns".into(), ctx.opts.max_conns.to_string()),
        ("domain_socket".into(), "NULL".into()),
        ("flush_enabled".into(), "yes".into()),
        ("binding_protocol".into(), "auto-negotiate".into()),
        (
            "idle_timeout".into(),
            ctx.opts.idle_timeout.map_or(0, |d| d.as_secs()).to_string(),
        ),
        ("auth_enabled_ascii".into(), yes_no(ctx.opts.auth.is_some())),
        ("auth_enabled_sasl".into(), yes_no(ctx.opts.auth.is_some())),
        ("detail_enabled".into(), yes_no(ctx.shared.detail.is_on())),
    ]
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}
