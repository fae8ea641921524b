package service

// InboxCacheLen answers how many workers' inboxes s caches, and their
// bytes.
func InboxCacheLen(s *Service) (int, int64) { return s.inboxes.len() }

// ParseAnswer splits a worker record's answer into its digest and the
// sequence of the inbox copy it names (0: none named).
func ParseAnswer(recorded string) (string, int64) { return parseAnswer(recorded) }
