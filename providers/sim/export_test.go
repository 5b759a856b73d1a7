package sim

// KeyInFlight reports whether the first request with key is still running.
func KeyInFlight(s *Server, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	return e != nil && !e.done
}
