"""Load testing of OpenAI-compatible endpoints: a streaming client, arrival schedules, SLO sweeps, the knee."""
