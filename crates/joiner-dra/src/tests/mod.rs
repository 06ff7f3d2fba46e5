mod allocator;
mod cel;
mod properties;
