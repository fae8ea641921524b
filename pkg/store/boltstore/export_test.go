package boltstore

// Abandon lets the file go without an orderly shutdown, for
// storetest.RunDurable. bbolt's Close writes nothing (every commit was
// fsynced already): it only unmaps the file and drops its lock, which is
// what the kernel does for a killed process. TestKill kills a real process.
func (s *Store) Abandon() { s.db.Close() }
