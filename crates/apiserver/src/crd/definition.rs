//! CRD objects: validation, defaulting, and the resource types they serve (being written).
