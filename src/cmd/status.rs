//! `pgnload status`: placeholder while the import bookkeeping lands.

/// Options of `pgnload status`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `pgnload status`.
pub fn run(
    _args: &StatusArgs,
    _settings: &crate::config::Settings,
) -> crate::Result<super::ExitStatus> {
    Err(crate::Error::Config("status is not implemented yet".into()))
}
