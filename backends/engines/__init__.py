"""The engines. Each module is imported only when its engine is created (see registry)."""
