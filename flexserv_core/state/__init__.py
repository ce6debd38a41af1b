"""The state layer: one store for everything clients create (stored responses,
files, fitted models), chosen by ``--state-url``. See ``docs/state.md``."""
