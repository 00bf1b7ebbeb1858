"""GPU profiles (YAML) for the fake pynvml: one file per machine type."""
