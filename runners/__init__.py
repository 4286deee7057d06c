"""What is benchmarked: device profiles, the bundled Engram server, external engine recipes."""
