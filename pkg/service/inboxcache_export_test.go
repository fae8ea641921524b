package service

// InboxCacheLen answers how many workers' inboxes s caches, and their
// bytes.
func InboxCacheLen(s *Service) (int, int64) { return s.inboxes.len() }
