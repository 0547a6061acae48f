//! `pgnload import`: placeholder.

use crate::config::Overrides;

/// Options of `pgnload import`.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// PGN inputs.
    #[arg(required = true)]
    pub inputs: Vec<String>,
}

impl ImportArgs {
    /// Adds this command's flags to the override layer.
    pub fn add_overrides(&self, _overrides: &mut Overrides) {}
}

/// Runs `pgnload import`.
pub fn run(
    _args: &ImportArgs,
    _settings: &crate::config::Settings,
    _quiet: bool,
) -> crate::Result<super::ExitStatus> {
    Err(crate::Error::Config("import is not implemented yet".into()))
}
