package control

// InventoryWaiting is how many callers wait on the scan in flight, for
// tests that must know every caller has joined before the scan ends.
func InventoryWaiting(s *Server) int { return s.inv.waiting() }
