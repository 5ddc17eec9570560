"""The whole product: installed as users install it, run as processes, on Redis
topologies and through faults, and the rules of the repository's layout."""
