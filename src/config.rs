//! Project configuration: fixture groups from `fixtures.manifest` and `[tool.fixgate]` in
//! `pyproject.toml` (or defaults from the snapshot's file list), plus the other `[tool.fixgate]`
//! settings, validated with file and line so that every message says where and what to do.
//!
//! Everything here works on bytes handed in by the caller (the snapshot's copy of each file), never
//! on the working tree, so the base's configuration is read from the base.

mod defaults;
mod groups;
mod load;
mod manifest;
mod model;
mod pyproject;

pub(crate) use groups::FixtureGroups;
pub(crate) use load::{load, Config, ConfigInputs};
pub(crate) use manifest::MANIFEST_FILE;
pub(crate) use model::{
    BudgetConfig, ConfigError, ConfigSource, DepsMode, Group, LimitsConfig, RemoteExecConfig,
};
pub(crate) use pyproject::PYPROJECT_FILE;
pub(crate) use pyproject::{fork_setting, remote_cache};
