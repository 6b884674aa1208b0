"""What a run is asked to do: the run configuration (timing policy, math flags) and the tolerances at each precision."""
