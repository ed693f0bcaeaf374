"""capgeo's benchmarks: one script a figure, each a ratio measured in one run ."""
