"""Run orchestration: benchmark sessions, sweeps and quality runs over spawned engine workers."""
