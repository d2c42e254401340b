package app

// Addrs are the addresses the listeners bound, for a caller that asked
// for port 0; Debug is "" when the debug listener is off.
type Addrs struct{ GRPC, HTTP, Debug string }

// Addrs returns the bound addresses.
func (a *App) Addrs() Addrs {
	out := Addrs{GRPC: grpcAddrString(a.srv.gl), HTTP: a.srv.hl.Addr().String()}
	if a.srv.dl != nil {
		out.Debug = a.srv.dl.Addr().String()
	}
	return out
}
