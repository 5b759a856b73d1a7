package sim

import "fmt"

// KeyInFlight reports whether the first request with key is still running.
func KeyInFlight(s *Server, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	return e != nil && !e.done
}

// ValidBRCode checks a BR Code's CRC16.
func ValidBRCode(s string) bool {
	if len(s) < 8 || s[len(s)-8:len(s)-4] != "6304" {
		return false
	}
	return s[len(s)-4:] == fmt.Sprintf("%04X", crc16CCITT([]byte(s[:len(s)-4])))
}
