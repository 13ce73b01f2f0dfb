//! The audit DAG: nodes added with their inputs, so it is acyclic by construction.

use std::collections::HashMap;

use petgraph::graph::{DiGraph, NodeIndex};

use crate::Node;

/// A node's handle in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) NodeIndex);

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
    pub(crate) dag: DiGraph<Node, ()>,
    /// Each node's inputs in edge order (petgraph's own edge lists come out reversed).
    pub(crate) inputs: Vec<Vec<NodeIndex>>,
    pub(crate) version: String,
    labels: HashMap<String, NodeIndex>,
}

impl Graph {
    /// An empty graph whose derivations carry `version` (the fixgate version).
    pub fn new(version: impl Into<String>) -> Graph {
        Graph {
            dag: DiGraph::new(),
            inputs: Vec::new(),
            version: version.into(),
            labels: HashMap::new(),
        }
    }

    /// Adds `node`, computed from the outputs of `inputs` (in this order).
    pub fn add(&mut self, node: Node, inputs: &[NodeId]) -> Result<NodeId, GraphError> {
        if self.labels.contains_key(&node.label) {
            return Err(GraphError::DuplicateLabel(node.label));
        }
        if inputs.iter().any(|i| i.0.index() >= self.dag.node_count()) {
            return Err(GraphError::UnknownInput { label: node.label });
        }
        let label = node.label.clone();
        let id = self.dag.add_node(node);
        for input in inputs {
            self.dag.add_edge(input.0, id, ());
        }
        self.inputs.push(inputs.iter().map(|i| i.0).collect());
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
        self.inputs[index.index()]
            .iter()
            .map(|i| self.dag[*i].label.clone())
            .collect()
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
}
