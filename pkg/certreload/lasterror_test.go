package certreload

// LastError reports the most recent failed reload, or nil; the previous
// good files stay in use after a failure.
func (s *Server) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}
