// Placeholder so the library has a source until the real ones land; delete when the folder has code.
