//! Prints the markdown table of the last `cargo bench -p leasehold-benches --bench engine` run
//! (medians and ratios, read from criterion's `estimates.json` files).
#![forbid(unsafe_code)]

use leasehold_benches::report;

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(report::criterion_dir, Into::into);
    print!("{}", report::table(&dir));
}
