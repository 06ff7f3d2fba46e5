mod allocator;
mod cel;
mod list_attributes;
mod properties;
mod upstream;
