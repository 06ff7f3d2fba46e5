use proptest::prelude::*;

use super::*;

fn usd(x: f64) -> Price {
    Price::from_usd(x).unwrap()
}

/// A type with room in (cpu, gpu) that admits every one of `groups` groups.
fn node_type(cpu: i128, gpu: i128, price: f64, groups: usize) -> NodeType {
    NodeType {
        price: usd(price),
        room: vec![cpu, gpu],
        admits: vec![true; groups],
    }
}

fn problem(groups: &[((i128, i128), u32)], types: &[(i128, i128, f64)]) -> Problem {
    let mut types: Vec<NodeType> = types
        .iter()
        .map(|&(c, g, p)| node_type(c, g, p, groups.len()))
        .collect();
    types.sort_by_key(|t| t.price);
    Problem {
        requests: groups.iter().map(|((c, g), _)| vec![*c, *g]).collect(),
        counts: groups.iter().map(|(_, n)| *n).collect(),
        types,
    }
}

fn optimal(p: &Problem) -> Packing {
    match solve(p, Price::MAX, &mut Budget { left: 1_000_000 }) {
        Solved::Optimal(packing) => packing,
        other => panic!("expected a packing, got {other:?}"),
    }
}

/// Every pod is in exactly one node, and each node's type holds its pods.
fn assert_valid(p: &Problem, packing: &Packing) {
    let mut placed = vec![0; p.counts.len()];
    let mut price = Price::ZERO;
    for node in &packing.nodes {
        let t = &p.types[node.node_type];
        let mut used = vec![0i128; t.room.len()];
        for (g, &c) in node.counts.iter().enumerate() {
            placed[g] += c;
            assert!(c == 0 || t.admits[g], "group {g} on a type that refuses it");
            add_times(&mut used, &p.requests[g], i128::from(c));
        }
        assert!(
            resources::fits_in(&used, &t.room),
            "{node:?} overflows its type"
        );
        price = price.saturating_add(t.price);
    }
    assert_eq!(placed, p.counts);
    assert_eq!(price, packing.price);
}

#[test]
fn one_gpu_pods_take_one_gpu_nodes_when_eight_of_them_cost_less_than_one_big_node() {
    let p = problem(&[((1, 1), 8)], &[(4, 1, 1.0), (32, 8, 10.0)]);
    let packing = optimal(&p);
    assert_valid(&p, &packing);
    assert_eq!(packing.price, usd(8.0));
    assert_eq!(packing.nodes.len(), 8);
}

#[test]
fn pods_of_different_sizes_are_paired_to_fill_nodes() {
    // Sizes 6, 6, 4, 4 into nodes of 10: two nodes, each 6 + 4; first-fit by size also gets
    // this, but taking 4 + 4 together first would need three.
    let p = problem(&[((6, 0), 2), ((4, 0), 2)], &[(10, 0, 1.0)]);
    let packing = optimal(&p);
    assert_valid(&p, &packing);
    assert_eq!(packing.price, usd(2.0));
}

#[test]
fn the_cheapest_mix_of_types_wins() {
    // Five pods of 3 CPUs: a 16-CPU node (5 pods) at 4.0 beats a 12-CPU node (4 pods, 2.5)
    // plus a 4-CPU node (1 pod, 2.0), which the greedy margin would pick first.
    let p = problem(&[((3, 0), 5)], &[(4, 0, 2.0), (12, 0, 2.5), (16, 0, 4.0)]);
    let packing = optimal(&p);
    assert_valid(&p, &packing);
    assert_eq!(packing.price, usd(4.0));
}

#[test]
fn a_pod_no_type_holds_makes_the_batch_infeasible() {
    let p = problem(&[((1, 0), 3), ((64, 0), 1)], &[(8, 0, 1.0)]);
    assert_eq!(
        solve(&p, Price::MAX, &mut Budget { left: 1_000_000 }),
        Solved::NoneCheaper
    );
}

#[test]
fn a_type_that_refuses_a_group_is_not_used_for_it() {
    let mut p = problem(&[((1, 0), 2), ((1, 0), 2)], &[(8, 0, 1.0), (8, 0, 3.0)]);
    // The cheap type takes the first group only, so the second needs the dear one, which then
    // holds all four more cheaply than the pair of them (3.0 against 1.0 + 3.0).
    p.types[0].admits = vec![true, false];
    let packing = optimal(&p);
    assert_valid(&p, &packing);
    assert_eq!(packing.price, usd(3.0));
    assert_eq!(packing.nodes.len(), 1);
}

#[test]
fn a_search_over_its_budget_says_so() {
    let p = problem(
        &[((1, 0), 9), ((2, 0), 9), ((3, 0), 9), ((5, 0), 9)],
        &[(7, 0, 1.0), (11, 0, 1.5), (13, 0, 1.7)],
    );
    assert_eq!(
        solve(&p, Price::MAX, &mut Budget { left: 50 }),
        Solved::OverBudget
    );
    // A budget is shared: what one search used, the next does not get.
    let small = problem(&[((1, 0), 8)], &[(4, 0, 1.0), (8, 0, 1.5)]);
    let mut budget = Budget { left: 1_000_000 };
    assert!(matches!(
        solve(&small, Price::MAX, &mut budget),
        Solved::Optimal(_)
    ));
    assert!(budget.left < 1_000_000);
    let mut spent = Budget { left: 0 };
    assert_eq!(solve(&small, Price::MAX, &mut spent), Solved::OverBudget);
}

/// Least price over every partition of the pods into nodes, each node the cheapest type that
/// holds it: the definition the solver must meet.
fn brute_force(p: &Problem) -> Option<Price> {
    let pods: Vec<usize> = p
        .counts
        .iter()
        .enumerate()
        .flat_map(|(g, &n)| std::iter::repeat_n(g, n as usize))
        .collect();
    fn cost(p: &Problem, node: &[u32]) -> Option<Price> {
        let mut used = vec![0i128; p.requests[0].len()];
        for (g, &c) in node.iter().enumerate() {
            add_times(&mut used, &p.requests[g], i128::from(c));
        }
        p.types
            .iter()
            .filter(|t| {
                resources::fits_in(&used, &t.room)
                    && node.iter().zip(&t.admits).all(|(&c, &ok)| c == 0 || ok)
            })
            .map(|t| t.price)
            .min()
    }
    fn go(
        p: &Problem,
        pods: &[usize],
        i: usize,
        nodes: &mut Vec<Vec<u32>>,
        best: &mut Option<Price>,
    ) {
        if i == pods.len() {
            let total: Option<Price> = nodes.iter().map(|n| cost(p, n)).sum();
            if let Some(t) = total {
                *best = Some(best.map_or(t, |b| b.min(t)));
            }
            return;
        }
        for n in 0..nodes.len() {
            nodes[n][pods[i]] += 1;
            if cost(p, &nodes[n]).is_some() {
                go(p, pods, i + 1, nodes, best);
            }
            nodes[n][pods[i]] -= 1;
        }
        let mut node = vec![0; p.counts.len()];
        node[pods[i]] = 1;
        nodes.push(node);
        go(p, pods, i + 1, nodes, best);
        nodes.pop();
    }
    let mut best = None;
    go(p, &pods, 0, &mut Vec::new(), &mut best);
    best
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// On batches small enough to enumerate every partition, the solver's price is the least
    /// there is, and its packing is one it can launch.
    #[test]
    fn the_solver_finds_the_least_price_of_every_partition(
        groups in prop::collection::vec(((1i128..5, 0i128..3), 1u32..4), 1..4),
        types in prop::collection::vec((1i128..12, 0i128..5, 1u32..100), 1..5),
        refused in prop::collection::vec(any::<bool>(), 16),
    ) {
        let pods: u32 = groups.iter().map(|g| g.1).sum();
        prop_assume!(pods <= 8);
        let types: Vec<(i128, i128, f64)> =
            types.iter().map(|&(c, g, p)| (c, g, f64::from(p))).collect();
        let mut p = problem(&groups, &types);
        for (t, node_type) in p.types.iter_mut().enumerate() {
            for (g, ok) in node_type.admits.iter_mut().enumerate() {
                // Now and then a type refuses a group, never the cheapest refusing all.
                *ok = !(t > 0 && refused[(t * 4 + g) % 16] && refused[(g * 3 + t) % 16]);
            }
        }
        match (solve(&p, Price::MAX, &mut Budget { left: 10_000_000 }), brute_force(&p)) {
            (Solved::Optimal(packing), Some(best)) => {
                assert_valid(&p, &packing);
                prop_assert_eq!(packing.price, best);
                // Asked for less than the optimum, it finds nothing; just above, the optimum.
                prop_assert_eq!(solve(&p, best, &mut Budget { left: 10_000_000 }), Solved::NoneCheaper);
                let above = best.saturating_add(Price::from_nano_usd(1));
                prop_assert_eq!(solve(&p, above, &mut Budget { left: 10_000_000 }), Solved::Optimal(packing));
            }
            (Solved::NoneCheaper, None) => {}
            (got, want) => prop_assert!(false, "solver {:?}, brute force {:?}", got, want),
        }
    }
}
