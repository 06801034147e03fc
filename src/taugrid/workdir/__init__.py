"""The code snapshot of a run's workdir: archiving, ignore rules, content addressing,
checking and unpacking. Neutral: the CLI archives with it, the server checks and stores
what is uploaded, and every executor unpacks the same archive (the local one into the
run's directory; a Kubernetes pod will in an init container)."""
