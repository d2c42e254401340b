package rules

// Reload reads the directory now. On success the new snapshot replaces the
// current one; on failure the current one stays. Either way the result is
// logged and passed to Options.OnReload.
func (l *Loader) Reload() error { return l.reload(true, true) }
