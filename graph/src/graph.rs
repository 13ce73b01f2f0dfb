//! The audit DAG: nodes added with their inputs, so it is acyclic by construction.

use std::collections::HashMap;
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};

use crate::Node;

/// A node's handle in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) NodeIndex);

impl NodeId {
    /// The node's position in insertion order.
    pub fn index(self) -> usize {
        self.0.index()
    }
}

/// What an edge says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    /// The node computes from this input's output; the output's digest is part of its key.
    Input,
    /// The node was added because of this one's result and starts after it, but computes
    /// nothing from its output: everything it depends on is in its own derivation (a base check
    /// added for a head finding stays shared by every head that way).
    After,
}

/// A graph that cannot be built as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// Two nodes with one label: labels identify nodes across runs.
    #[error("node label {0:?} is used twice")]
    DuplicateLabel(String),
    /// An input that is not a node of this graph.
    #[error("node {label:?} has an input that is not in its graph")]
    UnknownInput {
        /// The node being added.
        label: String,
    },
}

/// The audit graph. A node's inputs must be added before it, which keeps the graph acyclic and
/// makes insertion order a topological order (the order of the report).
#[derive(Debug)]
pub struct Graph {
    pub(crate) dag: DiGraph<Arc<Node>, Edge>,
    /// Each node's inputs in edge order (petgraph's own edge lists come out reversed).
    pub(crate) inputs: Vec<Vec<NodeIndex>>,
    /// Each node's ordering-only predecessors ([`Edge::After`]).
    pub(crate) after: Vec<Vec<NodeIndex>>,
    pub(crate) version: String,
    labels: HashMap<String, NodeIndex>,
}

impl Graph {
    /// An empty graph whose derivations carry `version` (the fixgate version).
    pub fn new(version: impl Into<String>) -> Graph {
        Graph {
            dag: DiGraph::new(),
            inputs: Vec::new(),
            after: Vec::new(),
            version: version.into(),
            labels: HashMap::new(),
        }
    }

    /// Adds `node`, computed from the outputs of `inputs` (in this order).
    pub fn add(&mut self, node: Node, inputs: &[NodeId]) -> Result<NodeId, GraphError> {
        self.insert(Arc::new(node), inputs, &[])
    }

    /// Adds `node` with its inputs and the nodes it must start after.
    pub(crate) fn insert(
        &mut self,
        node: Arc<Node>,
        inputs: &[NodeId],
        after: &[NodeId],
    ) -> Result<NodeId, GraphError> {
        if self.labels.contains_key(&node.label) {
            return Err(GraphError::DuplicateLabel(node.label.clone()));
        }
        if inputs
            .iter()
            .chain(after)
            .any(|i| i.0.index() >= self.dag.node_count())
        {
            return Err(GraphError::UnknownInput {
                label: node.label.clone(),
            });
        }
        let label = node.label.clone();
        let id = self.dag.add_node(node);
        for input in inputs {
            self.dag.add_edge(input.0, id, Edge::Input);
        }
        for a in after {
            self.dag.add_edge(a.0, id, Edge::After);
        }
        self.inputs.push(inputs.iter().map(|i| i.0).collect());
        self.after.push(after.iter().map(|i| i.0).collect());
        self.labels.insert(label, id);
        Ok(NodeId(id))
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.dag.node_count()
    }

    /// Whether it has no nodes.
    pub fn is_empty(&self) -> bool {
        self.dag.node_count() == 0
    }

    /// The node labelled `label`.
    pub fn find(&self, label: &str) -> Option<NodeId> {
        self.labels.get(label).copied().map(NodeId)
    }

    /// The node `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.dag[id.0]
    }

    /// The labels of a node's inputs, in edge order.
    pub(crate) fn input_labels(&self, index: NodeIndex) -> Vec<String> {
        self.labels_of(&self.inputs[index.index()])
    }

    /// The labels of the nodes a node starts after.
    pub(crate) fn after_labels(&self, index: NodeIndex) -> Vec<String> {
        self.labels_of(&self.after[index.index()])
    }

    fn labels_of(&self, ids: &[NodeIndex]) -> Vec<String> {
        ids.iter().map(|i| self.dag[*i].label.clone()).collect()
    }

    /// Each node's dependents (either kind of edge), without duplicates, in insertion order.
    pub(crate) fn dependents(&self, index: NodeIndex) -> Vec<NodeIndex> {
        let mut out: Vec<NodeIndex> = self
            .dag
            .neighbors_directed(index, petgraph::Direction::Outgoing)
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// How many edges, of either kind, run from `from` to `to`.
    pub(crate) fn uses(&self, to: NodeIndex, from: NodeIndex) -> usize {
        self.inputs[to.index()]
            .iter()
            .chain(&self.after[to.index()])
            .filter(|j| **j == from)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Output;

    fn node(label: &str) -> Node {
        Node::new(label, "step", |_| Ok(Output::default()))
    }

    #[test]
    fn labels_are_unique() {
        let mut g = Graph::new("0");
        g.add(node("a"), &[]).unwrap();
        assert_eq!(
            g.add(node("a"), &[]).unwrap_err(),
            GraphError::DuplicateLabel("a".into())
        );
    }

    #[test]
    fn inputs_come_from_the_same_graph() {
        let mut other = Graph::new("0");
        other.add(node("x"), &[]).unwrap();
        let foreign = other.add(node("y"), &[]).unwrap();
        let mut g = Graph::new("0");
        assert!(matches!(
            g.add(node("a"), &[foreign]),
            Err(GraphError::UnknownInput { .. })
        ));
    }

    #[test]
    fn input_order_is_kept() {
        let mut g = Graph::new("0");
        let a = g.add(node("a"), &[]).unwrap();
        let b = g.add(node("b"), &[]).unwrap();
        let c = g.add(node("c"), &[b, a]).unwrap();
        assert_eq!(g.input_labels(c.0), vec!["b", "a"]);
        assert_eq!(g.find("c"), Some(c));
    }

    #[test]
    fn after_edges_are_kept_apart_from_inputs() {
        let mut g = Graph::new("0");
        let a = g.add(node("a"), &[]).unwrap();
        let b = g.add(node("b"), &[]).unwrap();
        let c = g.insert(Arc::new(node("c")), &[a], &[b]).unwrap();
        assert_eq!(g.input_labels(c.0), vec!["a"]);
        assert_eq!(g.after_labels(c.0), vec!["b"]);
        assert_eq!(g.dependents(b.0), vec![c.0]);
        assert_eq!(g.uses(c.0, b.0), 1);
    }
}
