"""memd's tests, mirroring the packages: tests/<package>/, tests/jobs/<job>/, tests/e2e/ (processes, real agents), tests/faults/."""
