//! The PostgreSQL side of the Database operator.
