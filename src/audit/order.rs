//! The orders of the matrix by name: file order, reversed, the seeds, and the nio order. A label
//! is what evidence, node labels and the report name an order by; [`OrderLabel::order`] is the
//! order itself over a collection.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::pytest::events::CollectedItem;
use crate::pytest::order;

/// An order of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum OrderLabel {
    /// Collection order.
    File,
    /// Collection order reversed (serial tests keep their places).
    Reversed,
    /// A shuffle of the non-serial tests by a portable RNG.
    Seed(u64),
    /// Collection order with each test run twice in a row in the same process (`--nio`): read
    /// only for idempotence, never as one more order of the matrix.
    Twice,
}

impl OrderLabel {
    /// The order this label gives over the collected items.
    pub(crate) fn order(self, items: &[CollectedItem]) -> Vec<String> {
        match self {
            OrderLabel::File => order::seeded(items, 0),
            OrderLabel::Reversed => order::reversed(items),
            OrderLabel::Seed(s) => order::seeded(items, s),
            OrderLabel::Twice => order::twice(items),
        }
    }
}

/// As the report, the evidence keys and the node labels spell it: `0`, `rev`, the seed, or
/// `nio`.
impl fmt::Display for OrderLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderLabel::File => f.write_str("0"),
            OrderLabel::Reversed => f.write_str("rev"),
            OrderLabel::Seed(s) => write!(f, "{s}"),
            OrderLabel::Twice => f.write_str("nio"),
        }
    }
}

impl Serialize for OrderLabel {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The matrix's orders: file order, reversed, then the seeds.
pub(crate) fn labels(seeds: &[u64]) -> Vec<OrderLabel> {
    let mut out = vec![OrderLabel::File, OrderLabel::Reversed];
    out.extend(seeds.iter().map(|&s| OrderLabel::Seed(s)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_spelled_as_the_report_has_always_spelled_them() {
        let spelled: Vec<String> = labels(&[3, 10])
            .into_iter()
            .chain([OrderLabel::Twice])
            .map(|l| l.to_string())
            .collect();
        assert_eq!(spelled, ["0", "rev", "3", "10", "nio"]);
        assert_eq!(
            serde_json::to_string(&OrderLabel::Reversed).unwrap_or_default(),
            "\"rev\""
        );
    }
}
