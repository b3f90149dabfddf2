"""The fork server: one process per machine that imports the preloads once and forks the
workers' warm trial processes (and the client the workers' pools ask it with)."""
