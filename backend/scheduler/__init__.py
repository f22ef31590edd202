"""The live scheduler: DB/Redis/Celery adapters around the pure policy core."""
