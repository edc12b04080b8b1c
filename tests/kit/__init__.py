"""The one test kit: helpers shared by the tests and the benches (see docs/testing.md, "The test kit")."""
