//! `ferrite_pool_check` / `ferrite.check(path)`: the deep check of a store
//! pool (`ferrite pool check --deep`'s store branch), from the library
//! functions it calls: `ferrite_pmem::Header::decode` and
//! `ferrite_engine::verify::verify_image`. Reads the file once, never
//! writes it.

use crate::error::{CapiError, Result};
use ferrite_pmem::Header;
use std::path::Path;

/// One thing wrong with a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// `pool`, `engine` or `heap`.
    pub component: String,
    /// Stable short name of the kind of problem (`engine-recovery`, `heap-leak`, …).
    pub kind: String,
    /// What is wrong, for people.
    pub message: String,
}

/// What the check found.
#[derive(Clone, Debug, Default)]
pub struct PoolCheck {
    /// What the pool holds (`cow engine on the ferrite allocator: 3 keys, …`).
    pub holds: String,
    /// Everything found wrong; empty for a sound, cleanly closed store.
    pub findings: Vec<Finding>,
    /// Live keys the walk found.
    pub keys: u64,
}

impl PoolCheck {
    /// One line per finding (`component: kind: message`), then a summary.
    pub fn report(&self) -> String {
        let mut s = String::new();
        for f in &self.findings {
            s.push_str(&format!("{}: {}: {}\n", f.component, f.kind, f.message));
        }
        let n = self.findings.len();
        if n == 0 {
            s.push_str(&format!("clean ({})\n", self.holds));
        } else {
            s.push_str(&format!(
                "{n} finding{} ({})\n",
                if n == 1 { "" } else { "s" },
                self.holds
            ));
        }
        s
    }
}

fn finding(component: &str, kind: &str, message: impl ToString) -> Finding {
    Finding {
        component: component.into(),
        kind: kind.into(),
        message: message.to_string(),
    }
}

/// Checks the pool file at `path`. `Err` only when it cannot be read; a
/// file that is not a pool, or a pool that holds no store, is a finding.
pub fn check_pool(path: &Path) -> Result<PoolCheck> {
    let image =
        std::fs::read(path).map_err(|e| CapiError::Io(format!("{}: {e}", path.display())))?;
    let mut r = PoolCheck::default();
    let header = match Header::decode(&image, image.len() as u64) {
        Ok(h) => h,
        Err(e) => {
            r.holds = "not a readable pool".into();
            r.findings.push(finding("pool", "pool-header", e));
            return Ok(r);
        }
    };
    let image = &image[..(header.size as usize).min(image.len())];
    if !ferrite_engine::verify::recognise(image, &header.layout) {
        r.holds = format!("layout '{}'", header.layout);
        r.findings.push(finding(
            "pool",
            "pool-layout",
            format!(
                "the pool holds no Ferrite store (layout '{}'); `ferrite pool check --deep` checks every kind of pool",
                header.layout
            ),
        ));
        return Ok(r);
    }
    let c = ferrite_engine::verify::verify_image(image, &header.layout);
    r.keys = c.keys;
    r.holds = match &c.superblock {
        Some(sb) => format!(
            "{} engine on the {} allocator: {} keys, {} blocks reachable, {} allocated",
            sb.engine, sb.allocator, c.keys, c.blocks, c.allocated
        ),
        None => "a store whose superblock does not decode".into(),
    };
    r.findings.extend(
        c.findings
            .iter()
            .map(|f| finding(f.component(), f.kind(), f)),
    );
    Ok(r)
}
