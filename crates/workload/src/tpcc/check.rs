//! The consistency conditions (TPC-C 3.3.2) checked over a loaded or
//! run database.

use super::{
    DISTRICTS, Key, Table, TpccConfig, TpccError, c, d, get_i64, get_row, get_u8, get_u32, get_u64,
    h, hex, k_customer, k_district, k_order_by_customer, k_warehouse, o, ol, scan_prefix, w,
};
use crate::Kv;

/// An order as the checks see it.
struct OrderInfo {
    id: u32,
    customer: u32,
    carrier: u8,
    ol_cnt: u8,
}

/// An order line as the checks see it.
struct LineInfo {
    order: u32,
    delivered: bool,
    amount: i64,
}

/// (orders, lines) of one district.
type DistrictOrders = (Vec<OrderInfo>, Vec<LineInfo>);

/// Every order and order line of a district, in o_id order.
fn district_orders<K: Kv>(
    kv: &mut K,
    wid: u16,
    did: u8,
) -> Result<DistrictOrders, TpccError<K::Error>> {
    let mut orders = Vec::new();
    let mut lines = Vec::new();
    let mut bad = None;
    let op = Key::new(Table::Order).u16(wid).u8(did);
    scan_prefix(kv, op.as_slice(), op.as_slice(), 64, &mut |k, v| {
        if v.len() != o::SIZE {
            bad = Some((Table::Order, k.to_vec(), v.len()));
            return false;
        }
        orders.push(OrderInfo {
            id: u32::from_be_bytes(k[k.len() - 4..].try_into().unwrap_or_default()),
            customer: get_u32(v, o::C_ID),
            carrier: get_u8(v, o::CARRIER),
            ol_cnt: get_u8(v, o::OL_CNT),
        });
        true
    })
    .map_err(TpccError::Kv)?;
    let lp = Key::new(Table::OrderLine).u16(wid).u8(did);
    if bad.is_none() {
        scan_prefix(kv, lp.as_slice(), lp.as_slice(), 256, &mut |k, v| {
            if v.len() != ol::SIZE {
                bad = Some((Table::OrderLine, k.to_vec(), v.len()));
                return false;
            }
            lines.push(LineInfo {
                order: u32::from_be_bytes(
                    k[k.len() - 5..k.len() - 1].try_into().unwrap_or_default(),
                ),
                delivered: get_u64(v, ol::DELIVERY_D) != 0,
                amount: get_i64(v, ol::AMOUNT),
            });
            true
        })
        .map_err(TpccError::Kv)?;
    }
    if let Some((table, key, len)) = bad {
        return Err(TpccError::Corrupt {
            table,
            key: hex(&key),
            len,
            want: table.row_size(),
        });
    }
    Ok((orders, lines))
}

/// Σ H_AMOUNT of warehouse `wid`'s HISTORY rows, per h_d_id (index 0 =
/// district 1), and per paying customer (c_w, c_d, c_id) into `per_customer`.
fn history_sums<K: Kv>(
    kv: &mut K,
    wid: u16,
    per_customer: Option<&mut std::collections::HashMap<(u16, u8, u32), i64>>,
) -> Result<[i64; DISTRICTS as usize], TpccError<K::Error>> {
    let mut sums = [0i64; DISTRICTS as usize];
    let mut bad = None;
    let mut per_customer = per_customer;
    let hp = Key::new(Table::History).u16(wid);
    scan_prefix(kv, hp.as_slice(), hp.as_slice(), 256, &mut |k, v| {
        let d = v.get(h::D).copied().unwrap_or(0);
        if v.len() != h::SIZE || d == 0 || d > DISTRICTS {
            bad = Some((k.to_vec(), v.len()));
            return false;
        }
        let amount = get_i64(v, h::AMOUNT);
        sums[d as usize - 1] += amount;
        if let Some(map) = per_customer.as_deref_mut() {
            let c = (
                u16::from_le_bytes([v[h::C_W], v[h::C_W + 1]]),
                v[h::C_D],
                get_u32(v, h::C_ID),
            );
            *map.entry(c).or_default() += amount;
        }
        true
    })
    .map_err(TpccError::Kv)?;
    if let Some((key, len)) = bad {
        return Err(TpccError::Corrupt {
            table: Table::History,
            key: hex(&key),
            len,
            want: h::SIZE,
        });
    }
    Ok(sums)
}

/// TPC-C's consistency conditions 1–9 (clause 3.3.2), for every warehouse
/// and district:
///
/// 1. W_YTD = Σ D_YTD over the warehouse's districts.
/// 2. D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID).
/// 3. max(NO_O_ID) - min(NO_O_ID) + 1 = number of NEW-ORDER rows.
/// 4. Σ O_OL_CNT = number of ORDER-LINE rows.
/// 5. O_CARRIER_ID is null exactly when a NEW-ORDER row exists for the order.
/// 6. O_OL_CNT = number of the order's ORDER-LINE rows.
/// 7. OL_DELIVERY_D is null exactly when the order's O_CARRIER_ID is null.
/// 8. W_YTD = Σ H_AMOUNT of the warehouse's HISTORY.
/// 9. D_YTD = Σ H_AMOUNT of the district's HISTORY.
///
/// Plus (reported as condition 0): every order has its by-customer index
/// entry. All of these read only rows a home-warehouse thread writes, so
/// they hold under any interleaving of terminals with disjoint homes.
/// Reads every order, line and history row: for tests and after quick runs.
pub fn check_consistency<K: Kv>(kv: &mut K, cfg: &TpccConfig) -> Result<(), TpccError<K::Error>> {
    let fail = |condition: u8, detail: String| Err(TpccError::Inconsistent { condition, detail });
    let mut row = Vec::new();
    for wid in 1..=cfg.warehouses {
        get_row(kv, Table::Warehouse, &k_warehouse(wid), &mut row)?;
        let w_ytd = get_i64(&row, w::YTD);
        let h_sums = history_sums(kv, wid, None)?;
        let mut d_sum = 0i64;
        for did in 1..=DISTRICTS {
            let here = format!("warehouse {wid} district {did}");
            get_row(kv, Table::District, &k_district(wid, did), &mut row)?;
            let d_ytd = get_i64(&row, d::YTD);
            d_sum += d_ytd;
            let next_o = get_u32(&row, d::NEXT_O);
            if d_ytd != h_sums[did as usize - 1] {
                return fail(
                    9,
                    format!(
                        "{here}: D_YTD {d_ytd} ≠ Σ H_AMOUNT {}",
                        h_sums[did as usize - 1]
                    ),
                );
            }
            let mut no_ids = Vec::new();
            let np = Key::new(Table::NewOrder).u16(wid).u8(did);
            scan_prefix(kv, np.as_slice(), np.as_slice(), 64, &mut |k, _| {
                no_ids.push(u32::from_be_bytes(
                    k[k.len() - 4..].try_into().unwrap_or_default(),
                ));
                true
            })
            .map_err(TpccError::Kv)?;
            let (orders, lines) = district_orders(kv, wid, did)?;
            let max_o = orders.iter().map(|o| o.id).max().unwrap_or(0);
            if next_o.wrapping_sub(1) != max_o {
                return fail(
                    2,
                    format!(
                        "{here}: D_NEXT_O_ID - 1 = {} but max(O_ID) = {max_o}",
                        next_o.wrapping_sub(1)
                    ),
                );
            }
            if let (Some(&min_no), Some(&max_no)) = (no_ids.first(), no_ids.last()) {
                if max_no != max_o {
                    return fail(
                        2,
                        format!("{here}: max(NO_O_ID) = {max_no}, max(O_ID) = {max_o}"),
                    );
                }
                if (max_no - min_no + 1) as usize != no_ids.len() {
                    return fail(
                        3,
                        format!(
                            "{here}: NO_O_ID {min_no}..={max_no} but {} rows",
                            no_ids.len()
                        ),
                    );
                }
            }
            let sum_ol: u64 = orders.iter().map(|o| o.ol_cnt as u64).sum();
            if sum_ol != lines.len() as u64 {
                return fail(
                    4,
                    format!("{here}: Σ O_OL_CNT = {sum_ol}, {} order lines", lines.len()),
                );
            }
            // Orders and lines are both in o_id order: walk them together.
            let mut li = 0;
            for o in &orders {
                let has_no = no_ids.binary_search(&o.id).is_ok();
                if (o.carrier == 0) != has_no {
                    return fail(
                        5,
                        format!(
                            "{here} order {}: carrier {}, new-order row {has_no}",
                            o.id, o.carrier
                        ),
                    );
                }
                let start = li;
                while li < lines.len() && lines[li].order == o.id {
                    if lines[li].delivered != (o.carrier != 0) {
                        return fail(
                            7,
                            format!(
                                "{here} order {}: carrier {} but a line's delivery date disagrees",
                                o.id, o.carrier
                            ),
                        );
                    }
                    li += 1;
                }
                if li - start != o.ol_cnt as usize {
                    return fail(
                        6,
                        format!(
                            "{here} order {}: O_OL_CNT {}, {} lines",
                            o.id,
                            o.ol_cnt,
                            li - start
                        ),
                    );
                }
                let idx = k_order_by_customer(wid, did, o.customer).u32(!o.id);
                if !kv.get(idx.as_slice(), &mut row).map_err(TpccError::Kv)? {
                    return fail(
                        0,
                        format!("{here} order {}: no by-customer index entry", o.id),
                    );
                }
            }
            if li != lines.len() {
                return fail(6, format!("{here}: order lines of missing orders"));
            }
        }
        if w_ytd != d_sum {
            return fail(
                1,
                format!("warehouse {wid}: W_YTD {w_ytd} ≠ Σ D_YTD {d_sum}"),
            );
        }
        let h_total: i64 = h_sums.iter().sum();
        if w_ytd != h_total {
            return fail(
                8,
                format!("warehouse {wid}: W_YTD {w_ytd} ≠ Σ H_AMOUNT {h_total}"),
            );
        }
    }
    Ok(())
}

/// TPC-C's customer conditions 10 and 12 (clause 3.3.2), for every
/// customer:
///
/// 10. C_BALANCE = Σ OL_AMOUNT of the customer's delivered order lines
///     - Σ H_AMOUNT of the customer's payments.
/// 12. C_BALANCE + C_YTD_PAYMENT = Σ OL_AMOUNT of delivered lines.
///
/// Unlike [`check_consistency`] these read customer rows that remote
/// transactions of other threads also write: they hold after a
/// single-threaded run, or any run with [`TpccConfig::remote`] off, but a
/// concurrent run with remote accesses may lose customer updates (module
/// docs) and fail them.
pub fn check_customers<K: Kv>(kv: &mut K, cfg: &TpccConfig) -> Result<(), TpccError<K::Error>> {
    let mut paid = std::collections::HashMap::new();
    for wid in 1..=cfg.warehouses {
        history_sums(kv, wid, Some(&mut paid))?;
    }
    let mut row = Vec::new();
    for wid in 1..=cfg.warehouses {
        for did in 1..=DISTRICTS {
            let (orders, lines) = district_orders(kv, wid, did)?;
            let mut delivered = vec![0i64; cfg.customers_per_district as usize + 1];
            let mut li = 0;
            for o in &orders {
                while li < lines.len() && lines[li].order == o.id {
                    if lines[li].delivered
                        && let Some(sum) = delivered.get_mut(o.customer as usize)
                    {
                        *sum += lines[li].amount;
                    }
                    li += 1;
                }
            }
            for cid in 1..=cfg.customers_per_district {
                get_row(kv, Table::Customer, &k_customer(wid, did, cid), &mut row)?;
                let balance = get_i64(&row, c::BALANCE);
                let ytd = get_i64(&row, c::YTD_PAYMENT);
                let ol_sum = delivered[cid as usize];
                let h_sum = paid.get(&(wid, did, cid)).copied().unwrap_or(0);
                let who = format!("customer {cid} of warehouse {wid} district {did}");
                if balance != ol_sum - h_sum {
                    return Err(TpccError::Inconsistent {
                        condition: 10,
                        detail: format!(
                            "{who}: C_BALANCE {balance} ≠ {ol_sum} delivered - {h_sum} paid"
                        ),
                    });
                }
                if balance + ytd != ol_sum {
                    return Err(TpccError::Inconsistent {
                        condition: 12,
                        detail: format!(
                            "{who}: C_BALANCE + C_YTD_PAYMENT = {} ≠ {ol_sum} delivered",
                            balance + ytd
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}
