"""memd's jobs: each module knows *what* to do; `memd` decides when and under which lock."""
