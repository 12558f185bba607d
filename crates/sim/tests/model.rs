//! Validation of the model: invariants, known answers, determinism and
//! golden statistics. Every test here can fail: the expected values are
//! either physical bounds computed from the configuration or figures
//! recorded from this model (golden) that any change of behaviour breaks.

use ferrite_sim::*;

fn synth(cores: usize, every: u32, updates: u32) -> Vec<Program> {
    let p = Synthetic {
        updates,
        commit_every: every,
        compute: (100, 300),
        ..Synthetic::default()
    };
    (0..cores).map(|c| synthetic(&p, 42, c)).collect()
}

fn run(mode: Mode, progs: &[Program], cycles: u64) -> Stats {
    simulate(&Config::table2(mode), progs, Run::Cycles(cycles)).unwrap()
}

#[test]
fn replaying_twice_gives_identical_statistics() {
    let progs = synth(16, 1, 400);
    for mode in Mode::ALL {
        let a = run(mode, &progs, 150_000);
        let b = run(mode, &progs, 150_000);
        assert_eq!(a, b, "{mode}");
        assert!(a.events > 0);
    }
}

#[test]
fn one_core_one_queue_fine_grained_equals_global() {
    for every in [1, 3] {
        let progs = synth(1, every, 2_000);
        let mut cfg = Config::table2(Mode::Global);
        cfg.sub_queues = 1;
        let g = simulate(&cfg, &progs, Run::Cycles(400_000)).unwrap();
        let f = simulate(
            &cfg.clone().with_mode(Mode::FineGrained),
            &progs,
            Run::Cycles(400_000),
        )
        .unwrap();
        let r = f.ipc() / g.ipc();
        assert!(
            (r - 1.0).abs() < 0.01,
            "every {every}: fine-grained/global IPC {r}"
        );
        assert!(g.commits() > 100);
    }
}

#[test]
fn empty_programs_and_no_cores() {
    for mode in Mode::ALL {
        let s = simulate(&Config::table2(mode), &[], Run::Cycles(1000)).unwrap();
        assert_eq!(s.ipc(), 0.0);
        let empty = vec![Program::default(); 4];
        let s = simulate(&Config::table2(mode), &empty, Run::Cycles(1000)).unwrap();
        assert_eq!(s.instructions, vec![0; 4]);
        assert_eq!((s.commits(), s.sync_reads, s.media_writes), (0, 0, 0));
        let s = simulate(&Config::table2(mode), &empty, Run::ToCompletion).unwrap();
        assert_eq!(s.cycles, 0);
    }
}

#[test]
fn write_only_trace_runs_at_the_media_bandwidth_bound() {
    // 16 cores stream non-temporal stores to distinct lines, no fences.
    let progs: Vec<Program> = (0..16)
        .map(|_| Program {
            ops: (0..2_000).map(Op::NtStore).collect(),
            footprint: 2_000,
        })
        .collect();
    for profile in [NvmProfile::PCM, NvmProfile::OPTANE] {
        let mut cfg = Config::table2(Mode::Adr);
        cfg.nvm = profile;
        let s = simulate(&cfg, &progs, Run::ToCompletion).unwrap();
        assert_eq!(s.media_writes, 32_000);
        let bound = cfg.write_bound_bytes_per_cycle();
        let bw = s.write_bytes_per_cycle();
        assert!(
            bw <= bound * 1.0001,
            "{}: {bw} above the bound {bound}",
            profile.name
        );
        assert!(
            bw >= bound * 0.95,
            "{}: {bw} well below the bound {bound}",
            profile.name
        );
    }
}

#[test]
fn per_task_commits_do_not_wait_for_each_other() {
    // Four tasks that commit after every persisted store (each on its own
    // sub-queue). Per-task commits
    // run as if each task were alone; global ones serialise.
    let committer = Program {
        ops: (0..500)
            .flat_map(|l| [Op::Compute(200), Op::Store(l), Op::Flush(l), Op::Commit])
            .collect(),
        footprint: 500,
    };
    let alone = run(Mode::FineGrained, std::slice::from_ref(&committer), 300_000);
    let pair = vec![committer; 4];
    let f = run(Mode::FineGrained, &pair, 300_000);
    let g = run(Mode::Global, &pair, 300_000);
    for c in 0..4 {
        let (a, f, g) = (
            alone.instructions[0] as f64,
            f.instructions[c] as f64,
            g.instructions[c] as f64,
        );
        assert!(
            (f / a - 1.0).abs() < 0.05,
            "core {c}: fine-grained {f} vs alone {a}"
        );
        assert!(g < 0.85 * a, "core {c}: global {g} vs alone {a}");
    }
    assert!(g.mean_commit_cycles() > 1.2 * f.mean_commit_cycles());
    // ADR: durable on acceptance, no syncs; global: one sync per commit
    // period, one period per commit (the last may still be in flight when
    // the budget ends).
    let a = run(Mode::Adr, &pair, 300_000);
    assert_eq!(a.sync_reads, 0);
    assert!((g.commits()..=g.commits() + 1).contains(&g.commit_syncs));
    assert_eq!(g.credit_syncs, 0);
}

#[test]
fn credits_force_synchronisation_when_a_queue_runs_dry() {
    // One task writing far more than 8 lines per commit exhausts its
    // sub-queue's credits; global mode has no per-queue credits.
    let progs = synth(2, 100, 3_000);
    let f = run(Mode::FineGrained, &progs, 400_000);
    let g = run(Mode::Global, &progs, 400_000);
    assert!(f.credit_syncs > 0);
    assert_eq!(g.credit_syncs, 0);
    assert_eq!(f.sync_reads, f.credit_syncs + f.commit_syncs);
}

#[test]
fn eadr_drops_flushes_and_commits_cost_nothing() {
    let progs = synth(4, 1, 1_000);
    let e = run(Mode::Eadr, &progs, 200_000);
    let a = run(Mode::Adr, &progs, 200_000);
    assert_eq!(e.mean_commit_cycles(), 0.0);
    assert!(e.ipc() > a.ipc());
    // Flushed lines reach the media under ADR only (eADR writes back just
    // the L3's dirty victims, none in so short a run).
    assert!(a.media_writes > 0);
    assert_eq!(e.media_writes, 0);
}

#[test]
fn sixteen_cores_fine_grained_beats_global_and_the_gap_shrinks_with_rarer_commits() {
    let ratio = |every| {
        let progs = synth(16, every, 600);
        let g = run(Mode::Global, &progs, 300_000);
        let f = run(Mode::FineGrained, &progs, 300_000);
        assert!(f.mean_commit_cycles() < g.mean_commit_cycles());
        f.ipc() / g.ipc()
    };
    let (r1, r100) = (ratio(1), ratio(100));
    assert!(r1 > 1.5, "every update: {r1}");
    assert!(
        r100 < r1 && r100 > 0.95,
        "every 100 updates: {r100} (every 1: {r1})"
    );
}

#[test]
fn bad_configurations_are_refused() {
    let mut cfg = Config::table2(Mode::Global);
    cfg.banks = 3;
    assert!(matches!(
        simulate(&cfg, &[], Run::Cycles(10)),
        Err(SimError::Config(_))
    ));
    let mut cfg = Config::table2(Mode::Global);
    cfg.queue_entries = 0;
    assert!(simulate(&cfg, &[], Run::Cycles(10)).is_err());
    let too_many = vec![Program::default(); 65];
    assert!(simulate(&Config::table2(Mode::Adr), &too_many, Run::Cycles(10)).is_err());
    for (block_lines, combine_ns) in [(0, 0.0), (65, 0.0), (4, -1.0), (4, f64::NAN)] {
        let mut cfg = Config::table2(Mode::Adr);
        cfg.nvm.block_lines = block_lines;
        cfg.nvm.combine_ns = combine_ns;
        assert!(
            matches!(
                simulate(&cfg, &[], Run::Cycles(10)),
                Err(SimError::Config(_))
            ),
            "{block_lines} lines, {combine_ns} ns"
        );
    }
}

/// Golden statistics: 4 cores of the default synthetic workload (seed 42)
/// for 200 000 cycles, committing every update and every 10. Any change to
/// the model's behaviour changes these; update them only with a reason.
#[test]
fn golden_statistics_per_model() {
    let mut got = Vec::new();
    for every in [1, 10] {
        let p = Synthetic {
            updates: 1_000,
            commit_every: every,
            ..Synthetic::default()
        };
        let progs: Vec<Program> = (0..4).map(|c| synthetic(&p, 42, c)).collect();
        for mode in Mode::ALL {
            let s = run(mode, &progs, 200_000);
            got.push((
                mode.name(),
                every,
                s.instructions.iter().sum::<u64>(),
                s.commits(),
                s.sync_reads,
                s.media_reads,
                s.media_writes,
            ));
        }
    }
    // (mode, commit_every, instructions, commits, sync reads, media reads, media writes)
    let want: Vec<(&str, u32, u64, u64, u64, u64, u64)> = vec![
        ("global", 1, 387794, 653, 654, 1286, 653),
        ("fine-grained", 1, 477866, 803, 804, 1573, 804),
        ("adr", 1, 805075, 1357, 0, 2657, 1355),
        ("eadr", 1, 1403157, 2370, 0, 4618, 0),
        ("global", 10, 1019925, 171, 171, 3370, 1723),
        ("fine-grained", 10, 1064813, 179, 358, 3512, 1796),
        ("adr", 10, 1162810, 194, 0, 3834, 1961),
        ("eadr", 10, 1397811, 234, 0, 4608, 0),
    ];
    assert_eq!(got, want, "golden statistics changed");
}

/// A real persist trace, recorded once from Ferrite's Classic log (100
/// appends of 64 B on an `eadr` pool, a commit point after each; written
/// by `ferrite_bench::suites::sim::record::log` and kept in the repository,
/// 12 KiB): it parses, has what the log does per append, and replays to the
/// same statistics in every mode on 4 cores.
#[test]
fn golden_statistics_of_a_recorded_log_trace() {
    use ferrite_pmem::trace::{EventKind, Trace};
    let bytes = include_bytes!("data/log-classic-100.trace");
    let t = Trace::from_bytes(bytes).expect("the golden trace parses");
    assert_eq!(t.threads.len(), 1);
    let th = &t.threads[0];
    assert_eq!(th.count(EventKind::Commit), 100);
    assert_eq!(
        th.count(EventKind::Fence),
        200,
        "two persist barriers per append"
    );
    let p = Program::from_trace(th, Config::table2(Mode::Adr).instr_per_ns, 1);
    assert_eq!(p.commits(), 100);
    let progs: Vec<Program> = (0..4)
        .map(|c| {
            let mut q = p.clone();
            let k = c * q.ops.len() / 4;
            q.ops.rotate_left(k);
            q
        })
        .collect();
    let mut got = Vec::new();
    for mode in Mode::ALL {
        let s = run(mode, &progs, 200_000);
        got.push((
            mode.name(),
            s.instructions.iter().sum::<u64>(),
            s.commits(),
            s.sync_reads,
            s.media_writes,
        ));
    }
    // (mode, instructions, commits, sync reads, media writes)
    let want: Vec<(&str, u64, u64, u64, u64)> = vec![
        ("global", 854493, 427, 428, 1336),
        ("fine-grained", 995196, 497, 498, 1555),
        ("adr", 1268549, 636, 0, 1983),
        ("eadr", 1600579, 803, 0, 0),
    ];
    assert_eq!(got, want, "golden statistics changed");
}

/// One core's program: `rounds` operations, operation `r` a non-temporal
/// store to each line of `lines(r)`, then a commit.
fn nt_commits(rounds: u64, lines: impl Fn(u64) -> Vec<u64>) -> Program {
    let mut ops = Vec::new();
    let mut top = 0;
    for r in 0..rounds {
        for l in lines(r) {
            top = top.max(l + 1);
            ops.push(Op::NtStore(l));
        }
        ops.push(Op::Commit);
    }
    Program {
        ops,
        footprint: top,
    }
}

/// P0's 256-byte media block on the Optane-like profile: four lines of one
/// block are one media write, four lines in four blocks are four (each a
/// partial block the media read-modify-writes); on PCM a block is a line.
#[test]
fn optane_writes_whole_256_byte_blocks() {
    let run_once = |nvm: NvmProfile, lines: &[u64]| {
        let mut cfg = Config::table2(Mode::Adr);
        cfg.nvm = nvm;
        simulate(
            &cfg,
            &[nt_commits(1, |_| lines.to_vec())],
            Run::ToCompletion,
        )
        .unwrap()
    };
    let one_block = [4, 5, 6, 7];
    let four_blocks = [0, 4, 8, 12];
    let s = run_once(NvmProfile::OPTANE, &one_block);
    assert_eq!(
        (s.media_writes, s.media_blocks, s.media_partial_blocks),
        (4, 1, 0)
    );
    let s = run_once(NvmProfile::OPTANE, &four_blocks);
    assert_eq!(
        (s.media_writes, s.media_blocks, s.media_partial_blocks),
        (4, 4, 4)
    );
    // Two lines of one block: one media write, partial.
    let s = run_once(NvmProfile::OPTANE, &[9, 10]);
    assert_eq!(
        (s.media_writes, s.media_blocks, s.media_partial_blocks),
        (2, 1, 1)
    );
    for lines in [&one_block, &four_blocks] {
        let s = run_once(NvmProfile::PCM, lines);
        assert_eq!(
            (s.media_writes, s.media_blocks, s.media_partial_blocks),
            (4, 4, 0)
        );
    }
}

/// Under ADR a commit is durable once the controller accepted the writes:
/// a round trip after the last one while the media keeps up. Operations
/// of 8 lines (a log append of 512 bytes), each committed: gathered in two
/// whole 256-byte blocks the media keeps up and an operation costs about
/// the commit's round trip; scattered over 8 blocks, each a whole block
/// write of the media's time, the writes wait for room in the queue and
/// an operation costs well over a round trip.
#[test]
fn adr_commits_of_scattered_lines_cost_more_than_a_round_trip_on_optane() {
    let mut cfg = Config::table2(Mode::Adr);
    cfg.nvm = NvmProfile::OPTANE;
    let round_trip = 2 * cfg.cycles(cfg.mc_path_ns);
    let clustered = nt_commits(200, |r| (8 * r..8 * r + 8).collect());
    let scattered = nt_commits(200, |r| (8 * r..8 * r + 8).map(|l| 4 * l).collect());
    let c = simulate(&cfg, std::slice::from_ref(&clustered), Run::ToCompletion).unwrap();
    let s = simulate(&cfg, std::slice::from_ref(&scattered), Run::ToCompletion).unwrap();
    assert_eq!((c.media_writes, s.media_writes), (1600, 1600));
    assert_eq!((c.media_blocks, c.media_partial_blocks), (400, 0));
    assert_eq!((s.media_blocks, s.media_partial_blocks), (1600, 1600));
    let per_op = |x: &Stats| x.cycles as f64 / x.commits() as f64;
    let (cm, sm) = (per_op(&c), per_op(&s));
    // Eight lines leave the core in 4 cycles, then the commit's round
    // trip; the drain of the last blocks at the end adds little over 200
    // operations.
    assert!(
        cm < 1.2 * round_trip as f64,
        "clustered: {cm} cycles per operation, round trip {round_trip}"
    );
    assert!(
        sm > 1.5 * cm,
        "scattered {sm} cycles per operation vs clustered {cm}"
    );
    // On PCM (a block is a line) the layout changes nothing.
    let mut pcm = cfg.clone();
    pcm.nvm = NvmProfile::PCM;
    let c = simulate(&pcm, &[clustered], Run::ToCompletion).unwrap();
    let s = simulate(&pcm, &[scattered], Run::ToCompletion).unwrap();
    assert_eq!((c.media_blocks, s.media_blocks), (1600, 1600));
}

/// Tasks begun part-way through one shared program behave exactly as
/// copies of the program rotated to begin there, looping or run once.
#[test]
fn staggered_tasks_equal_rotated_copies() {
    let p = synthetic(
        &Synthetic {
            updates: 300,
            ..Synthetic::default()
        },
        5,
        0,
    );
    let tasks = Task::staggered(&p, 6);
    assert_eq!(tasks[0].start, 0);
    assert_eq!(tasks[3].start, 3 * p.ops.len() / 6);
    let rotated: Vec<Program> = tasks
        .iter()
        .map(|t| {
            let mut q = p.clone();
            q.ops.rotate_left(t.start);
            q
        })
        .collect();
    for mode in Mode::ALL {
        let cfg = Config::table2(mode);
        for run in [Run::Cycles(120_000), Run::ToCompletion] {
            let a = simulate_tasks(&cfg, &tasks, run).unwrap();
            let b = simulate(&cfg, &rotated, run).unwrap();
            assert_eq!(a, b, "{mode} {run:?}");
        }
        // Run once, every task retires the whole program.
        let a = simulate_tasks(&cfg, &tasks, Run::ToCompletion).unwrap();
        assert!(a.instructions.iter().all(|&n| n == p.instructions()));
    }
    let bad = [Task {
        program: &p,
        start: p.ops.len(),
    }];
    assert!(matches!(
        simulate_tasks(&Config::table2(Mode::Adr), &bad, Run::ToCompletion),
        Err(SimError::Config(_))
    ));
}
