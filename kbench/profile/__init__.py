"""`kbench profile`: one call of eager and of a solution under Nsight Compute, each in its own process."""
