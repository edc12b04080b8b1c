"""Local HTTP(S) servers that stand in for what cannot run here: the kubelet, the API server and a YARN
NodeManager. They serve the checked-in payloads of tests/fixtures in the documented formats and check
requests the way the real servers do."""
