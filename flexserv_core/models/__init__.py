"""Model specs, the catalog of servable models and the registry of loaded ones."""
